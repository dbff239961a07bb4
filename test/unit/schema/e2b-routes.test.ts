// The generated list of E2B's routes matches the upstream spec it was generated from.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { E2B_ROUTES } from "../../../schema/api/e2b-routes.gen.ts";
import { render, routesOf, SPEC } from "../../../scripts/gen-e2b-routes.ts";

describe("schema/api/e2b-routes.gen.ts", () => {
  it("is what scripts/gen-e2b-routes.ts makes of ../shared/e2b-spec/openapi.yml (run it after the spec changes)", () => {
    const routes = routesOf(readFileSync(SPEC, "utf8"));
    expect(routes.length).toBeGreaterThan(50);
    expect(E2B_ROUTES).toEqual(routes);
    expect(readFileSync(new URL("../../../schema/api/e2b-routes.gen.ts", import.meta.url), "utf8")).toBe(render(routes));
  });

  it("reads methods under paths only", () => {
    const yaml = "openapi: 3.0.0\npaths:\n  /a/{id}:\n    parameters: []\n    get:\n      x: 1\n    delete:\n      y: 2\n  /b:\n    post: {}\ncomponents:\n  /c:\n    get: {}\n";
    expect(routesOf(yaml)).toEqual([["GET", "/a/{id}"], ["DELETE", "/a/{id}"], ["POST", "/b"]]);
  });
});
