// Finding a holder its record lost, without a cgroup: the host-wide search. A tenant's process
// can carry any sandbox's marker and the holder's command line (`exec -a`), so it must never be
// taken as another sandbox's holder: only the nonce the agent recorded and gave its holder counts.
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { discoverHolder, environHas, HOLDER_NONCE_ENV, sandboxPids } from "../../../../controllers/drivers/local/holder.ts";
import { MARKER_ENV } from "../../../../controllers/drivers/local/local-view.ts";

const victim = `victim${process.pid}`;
const nonce = "0123456789abcdef0123456789abcdef";
const started: ChildProcess[] = [];

afterEach(() => {
  for (const c of started.splice(0)) c.kill("SIGKILL");
});

/** Whether a child of `pid` runs `/usr/bin/sleep infinity` with the victim's marker. */
function childrenMarked(pid: number): boolean {
  const kids = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").split(" ").filter(Boolean).map(Number);
  return kids.some((k) => {
    try {
      return readFileSync(`/proc/${k}/cmdline`, "latin1") === "/usr/bin/sleep\0infinity\0" && environHas(k, `${MARKER_ENV}=${victim}\0`);
    } catch {
      return false;
    }
  });
}

/** `/usr/bin/sleep infinity` with `env`, as a holder at `process` level looks, once it runs. */
async function planted(env: Record<string, string>): Promise<number> {
  const c = spawn("/usr/bin/sleep", ["infinity"], { env: { PATH: "/usr/bin:/bin", ...env }, stdio: "ignore" });
  started.push(c);
  for (const end = Date.now() + 5000; !sandboxPids(victim).includes(c.pid!); await new Promise((r) => setTimeout(r, 5))) {
    if (Date.now() > end) throw new Error("planted process did not start");
  }
  return c.pid!;
}

describe("discoverHolder without a cgroup", () => {
  it("does not take a tenant's process with the victim's id and the holder's command line but no nonce", async () => {
    await planted({ [MARKER_ENV]: victim });
    expect(discoverHolder(victim, nonce)).toBeUndefined();
  });

  it("does not take one with a wrong nonce", async () => {
    await planted({ [MARKER_ENV]: victim, [HOLDER_NONCE_ENV]: "f".repeat(32) });
    expect(discoverHolder(victim, nonce)).toBeUndefined();
  });

  it("takes the process with the recorded nonce", async () => {
    await planted({ [MARKER_ENV]: victim });
    const pid = await planted({ [MARKER_ENV]: victim, [HOLDER_NONCE_ENV]: nonce });
    expect(discoverHolder(victim, nonce)?.holder.pid).toBe(pid);
  });

  /** Whether no holder is found while `unshare ...args` (with `env`) has a marked child running
   * the holder's command line as pid 1 of a new pid namespace (a parent that is not bwrap). */
  async function noneFoundBesideUnshare(args: string[], env: Record<string, string>): Promise<void> {
    const c = spawn("unshare", ["--pid", "--fork", ...args], { env: { PATH: "/usr/bin:/bin", ...env }, detached: true, stdio: "ignore" });
    try {
      for (const end = Date.now() + 5000; !childrenMarked(c.pid!); await new Promise((r) => setTimeout(r, 5))) {
        if (Date.now() > end) throw new Error("planted process did not start");
      }
      expect(discoverHolder(victim, undefined)).toBeUndefined();
    } finally {
      process.kill(-c.pid!, "SIGKILL");
    }
  }

  it("never takes a process in another pid namespace (a tenant's at bwrap), not even for a record without a nonce", async () => {
    // `unshare` is unmarked, as no parent of another sandbox's tenant carries the victim's marker.
    await noneFoundBesideUnshare(["/bin/sh", "-c", `exec env ${MARKER_ENV}=${victim} /usr/bin/sleep infinity`], {});
  });

  it("never takes a process in the sandbox's own pid namespace, which its tenant runs: only the agent's namespace holds holders", async () => {
    // `unshare` is marked, as a holder is: its child's namespace is the sandbox's own.
    await noneFoundBesideUnshare(["/usr/bin/sleep", "infinity"], { [MARKER_ENV]: victim });
  });

  it("still takes a holder by id and command line for a record of an older agent, which has no nonce", async () => {
    const pid = await planted({ [MARKER_ENV]: victim });
    expect(discoverHolder(victim, undefined)?.holder.pid).toBe(pid);
  });
});
