// The pure part of a template build (controllers/drivers/local/builder/plan.ts): cache keys chain
// through the steps and their config, force and skipCache invalidate from that step on, teams
// never share keys, and image references map to rootfs templates or to nothing.
import { describe, expect, it } from "vitest";
import { layerIdOf, planSteps, rootfsForImage } from "../../../../../controllers/drivers/local/builder/plan.ts";
import type { TemplateStep } from "../../../../../schema/api/template-build.ts";

const run = (cmd: string, force = false): TemplateStep => ({ type: "RUN", args: [cmd], force });
const base = { teamId: "t1", buildId: "b1", baseLayers: ["debian-x"], force: false };

describe("build plan", () => {
  it("an unchanged prefix keeps its keys; a change alters that step's key and every later one", () => {
    const a = planSteps({ ...base, steps: [run("a"), run("b"), run("c")] }).steps.map((s) => s.key);
    const b = planSteps({ ...base, buildId: "b2", steps: [run("a"), run("B"), run("c")] }).steps.map((s) => s.key);
    expect(b[0]).toBe(a[0]);
    expect(b[1]).not.toBe(a[1]);
    expect(b[2]).not.toBe(a[2]);
  });

  it("config steps make no layer but change the keys of the steps after them", () => {
    const plain = planSteps({ ...base, steps: [run("a")] }).steps;
    const withEnv = planSteps({ ...base, steps: [{ type: "ENV", args: ["A", "1"], force: false }, run("a")] });
    expect(withEnv.steps[0]!.layer).toBe(false);
    expect(withEnv.steps[1]!.key).not.toBe(plain[0]!.key);
    expect(withEnv.steps[1]!.config.env).toEqual({ A: "1" });
    expect(withEnv.config).toEqual({ user: "user", workdir: "/home/user", env: { A: "1" } });
    const user = planSteps({ ...base, steps: [{ type: "USER", args: ["root"], force: false }, { type: "WORKDIR", args: ["/app"], force: false }, run("a")] });
    expect(user.steps[2]!.config).toMatchObject({ user: "root", workdir: "/app" });
  });

  it("a base's config is the first step's and the result's unless a step changes it; E2B's defaults key as no config does", () => {
    const config = { user: "worker", workdir: "/srv", env: { P: "1" } };
    const from = planSteps({ ...base, config, steps: [run("a"), { type: "ENV", args: ["C", "2"], force: false }] });
    expect(from.steps[0]!.config).toEqual(config);
    expect(from.config).toEqual({ user: "worker", workdir: "/srv", env: { P: "1", C: "2" } });
    expect(from.steps[0]!.key).not.toBe(planSteps({ ...base, steps: [run("a")] }).steps[0]!.key);
    // Field order does not matter: a base with E2B's defaults keeps the layers built without one.
    const defaults = { env: {}, workdir: "/home/user", user: "user" };
    expect(planSteps({ ...base, config: defaults, steps: [run("a")] }).steps[0]!.key).toBe(planSteps({ ...base, steps: [run("a")] }).steps[0]!.key);
  });

  it("a forced step and every later one are forced, with keys of this build only", () => {
    const steps = [run("a"), run("b", true), run("c")];
    const one = planSteps({ ...base, steps }).steps;
    const two = planSteps({ ...base, buildId: "b2", steps }).steps;
    expect(one.map((s) => s.forced)).toEqual([false, true, true]);
    expect(two[0]!.key).toBe(one[0]!.key);
    expect(two[1]!.key).not.toBe(one[1]!.key);
    expect(planSteps({ ...base, force: true, steps }).steps.every((s) => s.forced)).toBe(true);
  });

  it("teams and bases never share keys", () => {
    const k = (over: Partial<typeof base>) => planSteps({ ...base, ...over, steps: [run("a")] }).steps[0]!.key;
    expect(k({ teamId: "t2" })).not.toBe(k({}));
    expect(k({ baseLayers: ["other"] })).not.toBe(k({}));
    expect(layerIdOf(k({}))).toMatch(/^step-[a-f0-9]{48}$/);
  });

  it("maps E2B's base and Debian images to base, an imported name to itself, anything else to nothing", () => {
    const has = (n: string) => n === "python-3.12";
    expect(rootfsForImage("e2bdev/base", has)).toBe("base");
    expect(rootfsForImage("debian:stable", has)).toBe("base");
    expect(rootfsForImage("python:3.12", has)).toBe("python-3.12");
    expect(rootfsForImage("python:3", has)).toBeUndefined();
    expect(rootfsForImage("../../etc", has)).toBeUndefined();
  });

  it("never names a template a build published (any team's b-<buildID>), however the reference spells it", () => {
    const victim = "b-0b1f8a52-5e1c-4c0e-9d7e-2f0c1a9b3e77";
    const has = (n: string) => n === victim;
    for (const ref of [victim, victim.replace("b-", "b/"), victim.replace("b-", "b:"), `-${victim}`]) expect(rootfsForImage(ref, has)).toBeUndefined();
  });
});
