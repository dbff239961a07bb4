// A Sandbox CRD's probes + autoPausePolicy as the edge's auto-pause policy (pure): exec and
// httpGet probes map with their timings, the edge's schema takes the result, and what cannot be
// run here (a missing probe, resume.whenProbedScheduleTime, a bad regex) says why.
import { describe, expect, it } from "vitest";
import { crdAutoPausePolicy } from "../../../../../controllers/drivers/kubernetes/auto-pause.ts";
import type { SandboxObject } from "../../../../../controllers/drivers/kubernetes/objects.ts";

const spec = (extra: object) => ({ ...extra }) as SandboxObject["spec"];
const idle = (probe: string, messageRegex = "^idle$") => ({ pause: { whenProbedIdleState: { probe, messageRegex, thresholdDuration: "30s" } } });

describe("crdAutoPausePolicy", () => {
  it("maps an exec probe and an httpGet probe", () => {
    expect(crdAutoPausePolicy(spec({ probes: [{ name: "a", exec: { command: ["cat", "/tmp/x"] }, periodSeconds: 2, timeoutSeconds: 3 }], autoPausePolicy: idle("a") }))).toEqual({
      policy: { probe: { exec: { command: ["cat", "/tmp/x"] }, periodSeconds: 2, timeoutSeconds: 3 }, messageRegex: "^idle$", thresholdDuration: "30s" },
    });
    expect(crdAutoPausePolicy(spec({ probes: [{ name: "h", httpGet: { port: 8080, path: "/idle" } }], autoPausePolicy: idle("h") }))).toMatchObject({
      policy: { probe: { http: { port: 8080, path: "/idle" }, periodSeconds: 10, timeoutSeconds: 5 } },
    });
  });

  it("is undefined without a policy, and says why when it cannot be run", () => {
    expect(crdAutoPausePolicy(spec({}))).toBeUndefined();
    expect(crdAutoPausePolicy(spec({ autoPausePolicy: idle("missing") }))).toEqual({ problem: expect.stringContaining('"missing"') });
    expect(crdAutoPausePolicy(spec({ probes: [{ name: "a", exec: { command: ["x"] } }], autoPausePolicy: { ...idle("a"), resume: { whenProbedScheduleTime: { probe: "a" } } } }))).toEqual({ problem: expect.stringContaining("whenProbedScheduleTime") });
    expect(crdAutoPausePolicy(spec({ probes: [{ name: "a", exec: { command: ["x"] } }], autoPausePolicy: idle("a", "(") }))).toEqual({ problem: expect.stringContaining("messageRegex") });
    expect(crdAutoPausePolicy(spec({ probes: [{ name: "a" }], autoPausePolicy: idle("a") }))).toEqual({ problem: expect.stringContaining("exactly one of exec and http") });
  });
});
