// A Sandbox CRD's probes + autoPausePolicy as the edge's auto-pause policy (pure): exec and
// httpGet probes map with their timings, the edge's schema takes the result, and what cannot be
// run here (a missing probe, a bad regex) says why; resume.whenProbedScheduleTime maps to the
// policy's resume.probed with the probe it names.
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

  it("maps resume.whenProbedScheduleTime to resume.probed with the probe it names (defaults: unix, 5m ahead)", () => {
    const probes = [{ name: "a", exec: { command: ["cat", "/tmp/x"] } }, { name: "next", exec: { command: ["cat", "/tmp/next"] }, timeoutSeconds: 2 }];
    expect(crdAutoPausePolicy(spec({ probes, autoPausePolicy: { ...idle("a"), resume: { whenProbedScheduleTime: { probe: "next" } } } }))).toMatchObject({
      policy: { resume: { probed: { probe: { exec: { command: ["cat", "/tmp/next"] }, timeoutSeconds: 2 }, timeFormat: "unix", leadTime: "5m" } } },
    });
    expect(crdAutoPausePolicy(spec({ probes, autoPausePolicy: { ...idle("a"), resume: { whenProbedScheduleTime: { probe: "next", timeFormat: "datetime", leadTime: "30s" } } } }))).toMatchObject({
      policy: { resume: { probed: { timeFormat: "datetime", leadTime: "30s" } } },
    });
  });

  it("is undefined without a policy, and says why when it cannot be run", () => {
    expect(crdAutoPausePolicy(spec({}))).toBeUndefined();
    expect(crdAutoPausePolicy(spec({ autoPausePolicy: idle("missing") }))).toEqual({ problem: expect.stringContaining('"missing"') });
    expect(crdAutoPausePolicy(spec({ probes: [{ name: "a", exec: { command: ["x"] } }], autoPausePolicy: { ...idle("a"), resume: { whenProbedScheduleTime: { probe: "gone" } } } }))).toEqual({ problem: expect.stringContaining('resume names probe "gone"') });
    expect(crdAutoPausePolicy(spec({ probes: [{ name: "a", exec: { command: ["x"] } }], autoPausePolicy: { ...idle("a"), resume: { whenProbedScheduleTime: { probe: "a", timeFormat: "weekday" } } } }))).toEqual({ problem: expect.stringContaining("timeFormat") });
    expect(crdAutoPausePolicy(spec({ probes: [{ name: "a", exec: { command: ["x"] } }], autoPausePolicy: idle("a", "(") }))).toEqual({ problem: expect.stringContaining("messageRegex") });
    expect(crdAutoPausePolicy(spec({ probes: [{ name: "a" }], autoPausePolicy: idle("a") }))).toEqual({ problem: expect.stringContaining("exactly one of exec and http") });
  });
});
