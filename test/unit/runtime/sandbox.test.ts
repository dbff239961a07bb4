import { describe, expect, it } from "vitest";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RuntimeSandbox, UnknownUserError } from "../../../controllers/runtime/sandbox.ts";
import type { SandboxView } from "../../../controllers/runtime/sandbox-view.ts";

const user = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };
const view: SandboxView = {
  toHost: (p) => p,
  toSandbox: (p) => p,
  lookupUser: (n) => (n === "user" ? user : undefined),
  command: () => { throw new Error("unused"); },
};

describe("RuntimeSandbox", () => {
  it("resolves ~ and relative paths under the user's home", () => {
    const s = new RuntimeSandbox("s", view);
    expect(s.resolvePath("a.txt", user)).toBe("/home/user/a.txt");
    expect(s.resolvePath("~/x/../b", user)).toBe("/home/user/b");
    expect(s.resolvePath("~", user)).toBe("/home/user");
    expect(s.resolvePath("/etc//hosts", user)).toBe("/etc/hosts");
  });

  it("checks the token once one is set", () => {
    const s = new RuntimeSandbox("s", view);
    expect(s.checkToken(undefined)).toBe(true);
    s.configure({ accessToken: "t0k" });
    expect(s.checkToken("t0k")).toBe(true);
    expect(s.checkToken("t0k ")).toBe(false);
    expect(s.checkToken(undefined)).toBe(false);
  });

  it("init applies only requests newer than the last applied one", () => {
    const s = new RuntimeSandbox("s", view);
    expect(s.init({ envVars: { A: "2" }, timestamp: "2026-01-01T00:00:02Z" })).toBe(true);
    expect(s.init({ envVars: { A: "1" }, timestamp: "2026-01-01T00:00:01Z" })).toBe(false);
    expect(s.envVars).toEqual({ A: "2" });
  });

  it("unknown users are a typed error", () => {
    const s = new RuntimeSandbox("s", view, { defaultUser: "user" });
    expect(s.resolveUser(undefined)).toBe(user);
    expect(() => s.resolveUser("ghost")).toThrow(UnknownUserError);
  });
});

describe("Runtime.removeSandbox keepState (a Stop pause)", () => {
  it("hands what a Stop-paused sandbox carried to the next registration under its id, and only that one", async () => {
    const { createRuntime } = await import("../../../controllers/runtime/runtime.ts");
    const rt = createRuntime();
    rt.addSandbox("s1", view).carried.set("interpreter.contexts", "ctx");
    expect(rt.removeSandbox("s1", { keepState: true })).toBe(true);
    expect(rt.removeSandbox("s1", { keepState: true })).toBe(false); // still Stop-paused: kept
    expect(rt.addSandbox("s1", view).carried.get("interpreter.contexts")).toBe("ctx");
    rt.removeSandbox("s1"); // deleted: gone with it
    expect(rt.addSandbox("s1", view).carried.size).toBe(0);
    rt.getSandbox("s1")!.carried.set("k", 1);
    rt.removeSandbox("s1", { keepState: true });
    rt.removeSandbox("s1"); // deleted while Stop-paused
    expect(rt.addSandbox("s1", view).carried.size).toBe(0);
    await rt.close();
  });

  it("with a parkedDir, what a Stop-paused sandbox carried outlives the runtime (an agent restart)", async () => {
    const { createRuntime } = await import("../../../controllers/runtime/runtime.ts");
    const dir = mkdtempSync(join(tmpdir(), "sbx-parked-"));
    try {
      const contexts = { contexts: [{ id: "c1", language: "python", cwd: "/tmp" }], defaults: [] };
      const first = createRuntime({ parkedDir: dir });
      first.addSandbox("s1", view).carried.set("interpreter.contexts", contexts);
      first.addSandbox("s2", view).carried.set("k", 2);
      first.removeSandbox("s1", { keepState: true });
      first.removeSandbox("s2", { keepState: true });
      await first.close();
      const second = createRuntime({ parkedDir: dir });
      second.retainParked(["s1"]); // s2 was deleted while the agent was down
      expect(second.addSandbox("s1", view).carried.get("interpreter.contexts")).toEqual(contexts);
      expect(second.addSandbox("s2", view).carried.size).toBe(0);
      second.removeSandbox("s1"); // deleted: its file goes too
      // Saved while it runs: an agent killed before it saw the pause (no removeSandbox) keeps it.
      const running = second.addSandbox("s3", view);
      running.carried.set("interpreter.contexts", contexts);
      running.saveCarried();
      // Saved and deleted in one agent's life: its file goes with it (not left for the next start).
      const brief = second.addSandbox("s4", view);
      brief.carried.set("k", 4);
      brief.saveCarried();
      second.removeSandbox("s4");
      expect(readdirSync(dir)).not.toContain("s4.json");
      await second.close();
      const third = createRuntime({ parkedDir: dir });
      expect(third.addSandbox("s3", view).carried.get("interpreter.contexts")).toEqual(contexts);
      third.removeSandbox("s3");
      await third.close();
      expect(readdirSync(dir)).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
