// Ending a sandbox's processes where it has no cgroup (process level, bwrap without cgroups): a
// scan of the host's processes (its pid namespace's, and the agent's namespace's carrying its
// marker; at process level every process's marker), pass after pass until a pass finds
// none, so that one of the sandbox's processes that forks while the search runs does not outlive
// it (a child made between a scan's listing of /proc and its kills is only in the next scan).
import { spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { alive, ENVIRON_CAP, environHas, exiting, procRef, sandboxPids, signalSandbox } from "../../../../controllers/drivers/local/holder.ts";
import { MARKER_ENV } from "../../../../controllers/drivers/local/local-view.ts";

const id = `sigscan${process.pid}`;

afterEach(() => {
  // Whatever a failed run left.
  for (let i = 0; i < 20 && sandboxPids(id).length; i++) {
    for (const pid of sandboxPids(id)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone
      }
    }
  }
});

/** A process's children (the kernel's list of its main thread's). */
const kidsOf = (pid: number) => readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").split(" ").filter(Boolean).map(Number);

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  for (const end = Date.now() + ms; !cond(); await new Promise((r) => setTimeout(r, 5))) {
    if (Date.now() > end) throw new Error("timed out");
  }
}

describe("signalSandbox without a cgroup", () => {
  it("SIGKILL leaves none of the sandbox's processes, those it forks while being killed included", async () => {
    // A process of the sandbox that forks a child every half millisecond (each lives on), so
    // children are made between a scan's listing of /proc and its kills.
    const forker = "while (1) { my $p = fork(); if (defined $p && !$p) { sleep 60; exit 0 } select(undef, undef, undef, 0.0005) }";
    const child = spawn("perl", ["-e", forker], { env: { PATH: "/usr/bin:/bin", [MARKER_ENV]: id }, detached: true, stdio: "ignore" });
    child.unref();
    await until(() => sandboxPids(id).length >= 10);
    const signalled = await signalSandbox(id, undefined, "SIGKILL");
    expect(signalled).toBeGreaterThanOrEqual(10);
    // What SIGKILL takes down goes (a zombie has no environment left to match): polled, as
    // exiting takes a moment on a loaded machine; a survivor keeps matching and times out.
    await until(() => sandboxPids(id).length === 0);
    expect(sandboxPids(id)).toEqual([]);
  });

  it("SIGSTOP and SIGCONT reach each process of the sandbox once", async () => {
    const child = spawn("sh", ["-c", "sleep 60 & sleep 60 & wait"], { env: { PATH: "/usr/bin:/bin", [MARKER_ENV]: id }, detached: true, stdio: "ignore" });
    child.unref();
    await until(() => sandboxPids(id).length === 3);
    expect(await signalSandbox(id, undefined, "SIGSTOP")).toBe(3);
    expect(await signalSandbox(id, undefined, "SIGCONT")).toBe(3);
    expect(await signalSandbox(id, undefined, "SIGKILL")).toBe(3);
  });
});

describe("a process's name is its own", () => {
  it("a tenant process named like /proc/<pid>/stat's fields (\"x) Z 1\") is still running, and SIGKILL still ends it", async () => {
    // The name (comm) sits in parentheses before the fields a kill's scan reads (state, parent,
    // flags): one that spells a zombie must not make a live process look ended.
    const dir = mkdtempSync(join(tmpdir(), "comm-"));
    const bin = join(dir, "x) Z 1 1 1");
    copyFileSync("/bin/sleep", bin);
    const child = spawn(bin, ["60"], { env: { PATH: "/usr/bin:/bin", [MARKER_ENV]: id }, detached: true, stdio: "ignore" });
    child.unref();
    try {
      await until(() => sandboxPids(id).length === 1);
      expect(readFileSync(`/proc/${child.pid}/stat`, "latin1")).toContain("(x) Z 1 1 1) S ");
      expect(exiting(child.pid!)).toBe(false);
      expect(await signalSandbox(id, undefined, "SIGKILL")).toBe(1);
      await until(() => exiting(child.pid!));
    } finally {
      child.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("the scan and pid namespaces", () => {
  it("skips a process in a pid namespace neither the agent's nor the sandbox's, though it carries the marker; takes every process of the sandbox's own; at `process` level reads them all", async () => {
    // `unshare` stays in the agent's namespace without the marker; its child is pid 1 of a new
    // one, with the marker, as another sandbox's tenant may give its processes.
    const child = spawn("unshare", ["--pid", "--fork", "/bin/sh", "-c", `exec env ${MARKER_ENV}=${id} sleep 60`], { env: { PATH: "/usr/bin:/bin" }, detached: true, stdio: "ignore" });
    child.unref();
    try {
      let inner: number | undefined;
      await until(() => {
        const kids = readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, "utf8").split(" ").filter(Boolean).map(Number);
        inner = kids.find((k) => environHas(k, `${MARKER_ENV}=${id}\0`));
        return inner !== undefined;
      });
      expect(sandboxPids(id)).toEqual([]);
      expect(sandboxPids(id, procRef(inner!))).toEqual([inner]);
      // At `process` level (no sandbox has a pid namespace) every environment is read.
      expect(sandboxPids(id, undefined, { everyNamespace: true })).toEqual([inner]);
    } finally {
      process.kill(-child.pid!, "SIGKILL");
    }
  });
  it("kills the sandbox's pid 1 and its namespace when the record has no `nsInit` (holder not yet adopted): found through the marked holder's child", async () => {
    // `unshare` plays the holder (agent's namespace, the marker); its child plays pid 1.
    const holder = spawn("unshare", ["--pid", "--fork", "/bin/sh", "-c", "sleep 60 & exec sleep 60"], { env: { PATH: "/usr/bin:/bin", [MARKER_ENV]: id }, detached: true, stdio: "ignore" });
    holder.unref();
    try {
        let inner: number[] = [];
      await until(() => {
        const init = kidsOf(holder.pid!)[0];
        inner = init === undefined ? [] : [init, ...kidsOf(init)];
        return inner.length === 2;
      });
      const refs = inner.map(procRef);
      expect(sandboxPids(id).sort()).toEqual([holder.pid!, ...inner].sort());
      await signalSandbox(id, undefined, "SIGKILL");
      // Ended: gone, a zombie or exiting (a pid 1 in its namespace's teardown shows state S).
      const runs = (ref: (typeof refs)[number]) => alive(ref) && !exiting(ref!.pid);
      await until(() => !refs.some(runs)).catch(() => undefined);
      for (const ref of refs) expect(runs(ref), `pid ${ref?.pid} of the sandbox's namespace`).toBe(false);
    } finally {
      try {
        process.kill(-holder.pid!, "SIGKILL");
      } catch {
        // gone
      }
    }
  });
  it("a freeze (SIGSTOP, then SIGCONT) also reaches a pid namespace nested in the sandbox's, never another sandbox's; a kill's scan leaves the nested one to the kernel", async () => {
    const state = (pid: number) => readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]![0];
    // B: a marked holder, pid 1 of B's namespace, and inside it a namespace of its own (as B's
    // root may `unshare -p`) whose pid 1 runs a child: the walk up crosses two processes there.
    const b = spawn("unshare", ["--pid", "--fork", "/bin/sh", "-c", "unshare --pid --fork /bin/sh -c 'sleep 60 & wait' & wait"], { env: { PATH: "/usr/bin:/bin", [MARKER_ENV]: id }, detached: true, stdio: "ignore" });
    // A: another sandbox (unmarked holder), whose tenant gives its pid 1 B's marker.
    const a = spawn("unshare", ["--pid", "--fork", "/bin/sh", "-c", `exec env ${MARKER_ENV}=${id} sleep 60`], { env: { PATH: "/usr/bin:/bin" }, detached: true, stdio: "ignore" });
    try {
      let nested: number[] = [];
      let aInit: number | undefined;
      await until(() => {
        const inner = kidsOf(b.pid!).flatMap(kidsOf); // B's `unshare` of the nested namespace
        const nestedInit = inner.flatMap(kidsOf)[0];
        nested = nestedInit === undefined ? [] : [nestedInit, ...kidsOf(nestedInit)];
        aInit = kidsOf(a.pid!)[0];
        return nested.length === 2 && aInit !== undefined && environHas(aInit, `${MARKER_ENV}=${id}\0`);
      });
      const bInit = procRef(kidsOf(b.pid!)[0]!);
      for (const pid of nested) expect(sandboxPids(id, bInit)).not.toContain(pid);
      const frozen = sandboxPids(id, bInit, { nested: true });
      expect(frozen).toEqual(expect.arrayContaining(nested));
      expect(frozen).not.toContain(aInit);
      await signalSandbox(id, bInit, "SIGSTOP");
      await until(() => nested.every((pid) => state(pid) === "T"));
      expect(state(aInit!)).not.toBe("T");
      await signalSandbox(id, bInit, "SIGCONT");
      await until(() => nested.every((pid) => state(pid) !== "T"));
    } finally {
      for (const c of [a, b]) process.kill(-c.pid!, "SIGKILL");
    }
  });
  it("a kill ends though a killed process of the sandbox's namespace stays a zombie its parent outside does not reap (as under an init that reaps lazily)", async () => {
    const holder = spawn("unshare", ["--pid", "--fork", "sleep", "60"], { env: { PATH: "/usr/bin:/bin", [MARKER_ENV]: id }, detached: true, stdio: "ignore" });
    let outside: ReturnType<typeof spawn> | undefined;
    try {
      let init: number | undefined;
      await until(() => (init = kidsOf(holder.pid!)[0]) !== undefined);
      // Unmarked, in the agent's namespace: joins the sandbox's pid namespace (nsenter without a
      // fork: its own pid stays outside, its children are made inside), forks a child there and
      // never reaps it.
      outside = spawn("nsenter", [`--pid=/proc/${init}/ns/pid`, "--no-fork", "perl", "-e", 'if (!fork()) { exec "sleep", "60" } sleep 60'], { env: { PATH: "/usr/bin:/bin" }, detached: true, stdio: "ignore" });
      await until(() => kidsOf(outside!.pid!).length === 1);
      const inner = procRef(kidsOf(outside.pid!)[0]!);
      const initRef = procRef(init!);
      await signalSandbox(id, initRef, "SIGKILL");
      expect(alive(inner)).toBe(false);
      // Exiting: it waits in its namespace's teardown for the zombie to be reaped.
      expect(Number(readFileSync(`/proc/${init}/stat`, "utf8").split(") ")[1]!.split(" ")[6]) & 4).toBe(4);
    } finally {
      outside?.kill("SIGKILL");
      process.kill(-holder.pid!, "SIGKILL");
    }
  });
});

describe("the marker scan of environments", () => {
  // The tenant's variables come first, the marker last (local-view.ts: sandboxEnv), and one
  // variable is at most 128 KiB (MAX_ARG_STRLEN): three make 300 KB before the marker.
  const pads = { PAD1: "x".repeat(100_000), PAD2: "y".repeat(100_000), PAD3: "z".repeat(100_000) };
  const entry = `${MARKER_ENV}=${id}\0`;

  it("finds a process whose marker sits after more than 64 KiB of the tenant's variables", async () => {
    const child = spawn("sleep", ["60"], { env: { PATH: "/usr/bin:/bin", ...pads, [MARKER_ENV]: id }, detached: true, stdio: "ignore" });
    child.unref();
    await until(() => sandboxPids(id).length === 1);
    expect(sandboxPids(id)).toEqual([child.pid]);
  });

  it("caps an environment above the largest exec gives (6 MiB) and well below what a tenant could make the agent read", () => {
    expect(ENVIRON_CAP).toBeGreaterThanOrEqual(6 * 1024 * 1024);
    expect(ENVIRON_CAP).toBeLessThanOrEqual(16 * 1024 * 1024);
  });

  it("stops reading an environment at its cap: a larger one is no match", async () => {
    const child = spawn("sleep", ["60"], { env: { PATH: "/usr/bin:/bin", ...pads, [MARKER_ENV]: id }, detached: true, stdio: "ignore" });
    child.unref();
    await until(() => sandboxPids(id).length === 1);
    expect(environHas(child.pid!, entry, 400_000)).toBe(true);
    expect(environHas(child.pid!, entry, 256 * 1024)).toBe(false);
  });

  it("takes a process that made its environment larger than the cap (9 MiB, PR_SET_MM_MAP) as no match", async () => {
    const child = spawn("perl", [fileURLToPath(new URL("./big-environ.pl", import.meta.url)), id], { env: { PATH: "/usr/bin:/bin" }, detached: true, stdio: ["ignore", "pipe", "inherit"] });
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout!.once("data", (b) => (String(b) === "ok\n" ? resolve() : reject(new Error(String(b)))));
        child.once("exit", (code) => reject(new Error(`exited ${code}`)));
      });
      // The marker is there, past the cap.
      expect(environHas(child.pid!, entry, 16 * 1024 * 1024)).toBe(true);
      expect(environHas(child.pid!, entry)).toBe(false);
      expect(sandboxPids(id)).toEqual([]);
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("matches the marker as a whole variable, first or after another, never inside another's name", async () => {
    const first = spawn("sleep", ["60"], { env: { [MARKER_ENV]: id, PATH: "/usr/bin:/bin" }, detached: true, stdio: "ignore" });
    const other = spawn("sleep", ["60"], { env: { PATH: "/usr/bin:/bin", [`X_${MARKER_ENV}`]: id }, detached: true, stdio: "ignore" });
    for (const c of [first, other]) c.unref();
    try {
      await until(() => sandboxPids(id).length === 1);
      expect(environHas(other.pid!, `X_${entry}`)).toBe(true);
      expect(sandboxPids(id)).toEqual([first.pid]);
    } finally {
      other.kill("SIGKILL");
    }
  });
});
