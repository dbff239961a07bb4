// The kept /proc/<pid>/stat descriptor the local driver's pid 1 watch reads (holder.ts StatHandle):
// a running or stopped process has not ended; a zombie, and a reaped one (ESRCH, even with its pid
// taken again), have; a pid whose start is not the recorded one is not opened.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { procRef, StatHandle } from "../../../../../controllers/drivers/local/holder.ts";
import { fieldsEnded, statFieldsIn } from "../../../../../controllers/drivers/local/proc-handle.ts";

async function state(pid: number, want: string): Promise<void> {
  for (let i = 0; i < 200; i++, await sleep(10)) {
    if (statFieldsIn(readFileSync(`/proc/${pid}/stat`, "latin1"))?.[0] === want) return;
  }
  throw new Error(`pid ${pid} never reached state ${want}`);
}

describe("a kept /proc/<pid>/stat handle", () => {
  it("running and stopped: not ended; reaped: ended", async () => {
    const child = spawn("sleep", ["30"], { stdio: "ignore" });
    const ref = procRef(child.pid!)!;
    const h = StatHandle.open(ref)!;
    expect(h).toBeDefined();
    expect(h.ended()).toBe(false);
    child.kill("SIGSTOP");
    await state(child.pid!, "T");
    expect(h.ended()).toBe(false);
    child.kill("SIGKILL");
    await once(child, "exit");
    await sleep(50);
    expect(h.ended()).toBe(true);
    h.close();
    expect(StatHandle.open(ref)).toBeUndefined();
  });

  it("a zombie (not reaped yet): ended", async () => {
    // sh forks a sleep that exits at once and never waits for it: a zombie until sh ends.
    const sh = spawn("sh", ["-c", "sleep 0 & echo $!; exec sleep 30"], { stdio: ["ignore", "pipe", "ignore"] });
    const [line] = (await once(sh.stdout!, "data")) as [Buffer];
    const pid = Number(String(line).trim());
    const ref = procRef(pid)!;
    const h = StatHandle.open(ref);
    // Opened while it still ran, or refused as already ended: either way never "running" once Z.
    await state(pid, "Z");
    expect(h === undefined || h.ended()).toBe(true);
    expect(StatHandle.open(ref)).toBeUndefined();
    h?.close();
    sh.kill("SIGKILL");
  });

  it("a recorded start that is not the process's: not opened", () => {
    const ref = procRef(process.pid)!;
    expect(StatHandle.open({ pid: ref.pid, start: `${Number(ref.start) + 1}` })).toBeUndefined();
    const h = StatHandle.open(ref)!;
    expect(h.ended()).toBe(false);
    h.close();
  });

  it("pid 1's name is the tenant's (root inside writes /proc/1/comm): names with ') Z', ') X' and a newline neither fake nor hide an end, and the handle agrees with the one parser", async () => {
    const dir = mkdtempSync(join(tmpdir(), "stat-handle-"));
    try {
      for (const name of ["a) Z 1 2", "b) X 1 4194304", "n\ne) Z", "0123456789abcdef"]) {
        const named = join(dir, name);
        symlinkSync("/bin/sleep", named);
        const child = spawn(named, ["30"], { stdio: "ignore" });
        const h = StatHandle.open(procRef(child.pid!)!)!;
        try {
          expect(h).toBeDefined();
          expect(h.ended()).toBe(false);
          expect(h.ended()).toBe(fieldsEnded(statFieldsIn(readFileSync(`/proc/${child.pid}/stat`, "latin1"))!));
          child.kill("SIGSTOP");
          await state(child.pid!, "T");
          expect(h.ended()).toBe(false);
        } finally {
          child.kill("SIGKILL");
          await once(child, "exit");
        }
        await sleep(20);
        expect(h.ended()).toBe(true);
        h.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
