import { exports } from "cloudflare:workers";
import { expect, it } from "vitest";

it("answers /health", async () => {
  const res = await exports.default.fetch("http://edge.test/health");
  expect(await res.json()).toEqual({ ok: true });
});
