// A holder its record lost (an agent killed between the holder's start and the record write) is
// found by its nonce, and its pid 1 is the outer bwrap's child. A child that has ended (a zombie
// the outer bwrap has not reaped yet: a pid 1 killed a moment ago) is no running sandbox: taken
// as one, the driver recorded it Running and the pid-1 watch found it ended again every second.
// A perl named `bwrap` stands in for the outer bwrap: no root, no namespaces.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { PERL } from "../../../../../controllers/drivers/local/host-helpers.ts";
import { discoverHolder, HOLDER_NONCE_ENV, procRef } from "../../../../../controllers/drivers/local/holder.ts";
import { MARKER_ENV } from "../../../../../controllers/drivers/local/local-view.ts";
import { statFieldsIn } from "../../../../../controllers/drivers/local/proc-handle.ts";

/** A stand-in holder whose one child runs `child` (perl), printing the child's pid. */
async function holder(id: string, nonce: string, child: string) {
  const p = spawn(PERL, ["-e", `my $c = fork; if (!$c) { ${child} } $| = 1; print "$c\\n"; sleep 60`], {
    argv0: "bwrap",
    env: { PATH: "/usr/bin:/bin", [MARKER_ENV]: id, [HOLDER_NONCE_ENV]: nonce },
    stdio: ["ignore", "pipe", "ignore"],
  });
  const [out] = (await once(p.stdout!, "data")) as [Buffer];
  return { p, child: Number(String(out).trim()) };
}

const stateOf = (pid: number) => statFieldsIn(readFileSync(`/proc/${pid}/stat`, "latin1"))?.[0];

describe("discoverHolder", () => {
  it("finds a lost holder by its nonce with its running pid 1; not one whose pid 1 has ended and is not reaped yet", async () => {
    const live = await holder(`dh${process.pid}a`, "n1", "sleep 60; exit 0");
    const ended = await holder(`dh${process.pid}b`, "n2", "exit 0");
    try {
      expect(discoverHolder(`dh${process.pid}a`, "n1", [live.p.pid!])).toEqual({ holder: procRef(live.p.pid!), nsInit: procRef(live.child) });
      // Another nonce: not ours.
      expect(discoverHolder(`dh${process.pid}a`, "other", [live.p.pid!])).toBeUndefined();
      const until = Date.now() + 5000;
      while (stateOf(ended.child) !== "Z" && Date.now() < until) await sleep(10);
      expect(stateOf(ended.child)).toBe("Z");
      expect(discoverHolder(`dh${process.pid}b`, "n2", [ended.p.pid!])).toBeUndefined();
    } finally {
      // The live stand-in's child too (its sleep would outlive the test by a minute), and wait
      // for both parents so nothing of the test is left running.
      try {
        process.kill(live.child, "SIGKILL");
      } catch {
        // already gone
      }
      for (const h of [live, ended]) {
        const exited = h.p.exitCode !== null || h.p.signalCode !== null ? Promise.resolve() : once(h.p, "exit");
        h.p.kill("SIGKILL");
        await exited;
      }
    }
  });
});
