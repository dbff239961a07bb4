// What e2e tests of one team's sandboxes on the local agent share: the HTTP API with a team's own
// key (or the admin key), and what the local agent on this host holds of a sandbox.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { inject } from "vitest";
import { layoutFor } from "../../controllers/drivers/local/layout.ts";
import { readRecord } from "../../controllers/drivers/local/records.ts";
import { e2b } from "./sdk.ts";

/** An HTTP call with the admin key, or with `key`: status and parsed body. */
export async function api(path: string, init: { method?: string; body?: unknown; key?: string } = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(`${e2b().apiUrl}${path}`, {
    method: init.method ?? (init.body === undefined ? "GET" : "POST"),
    headers: { "x-api-key": init.key ?? e2b().apiKey, "content-type": "application/json" },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** What the local agent on this host holds of sandbox `id`: its record, its pid 1 (alive), the
 * processes of its cgroup, its disk image, and mounts under its directory. */
export function hostSide(id: string): { record: boolean; pid1Alive: boolean; cgroupProcs: number; diskBytes: number; mounts: number } {
  const layout = layoutFor(join(inject("e2b").dataDir, "agent/local"), id);
  const rec = existsSync(layout.dir) ? readRecord(layout.record) : null;
  const pid = rec?.nsInit?.pid;
  const procs = rec?.cgroups?.core && existsSync(join(rec.cgroups.core, "cgroup.procs")) ? readFileSync(join(rec.cgroups.core, "cgroup.procs"), "utf8").split("\n").filter(Boolean).length : 0;
  const mounts = readFileSync("/proc/self/mountinfo", "utf8").split("\n").filter((l) => l.split(" ")[4]?.startsWith(`${layout.dir}/`)).length;
  return {
    record: rec !== null,
    pid1Alive: pid !== undefined && existsSync(`/proc/${pid}`),
    cgroupProcs: procs,
    diskBytes: existsSync(layout.image) ? statSync(layout.image).blocks * 512 : 0,
    mounts,
  };
}

/** How many processes on this host have exactly this command line (`argv` joined by spaces),
 * wherever they are: a check of what runs that does not rely on the sandbox's record. */
export function processesWith(cmdline: string): number {
  let n = 0;
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ") === cmdline) n++;
    } catch {
      // Gone meanwhile.
    }
  }
  return n;
}
