// One build of a step key at a time on this machine: the agent's builds and direct builds (other
// processes: `npm start`'s, `.ci/run`'s, a test setup's) share the layer store, so before a step's
// layer is built its builder claims the layer id with a file created exclusively beside the
// layers (`.claim-<layer>`, holding the owner's pid and start time). A second builder of the same
// key waits until the layer is there (then it is cached) or the claim is gone (the first failed
// or died: then it builds). A claim whose owner is dead (pid gone or reused) is taken over.
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** The owner mark of this process: its pid and its start time (so a reused pid is not it). */
function mark(pid: number): string | undefined {
  try {
    // Field 22 of /proc/<pid>/stat, after the command name's closing parenthesis.
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return `${pid} ${stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]}`;
  } catch {
    return undefined;
  }
}

const OWN = mark(process.pid) ?? `${process.pid} ?`;

/** Whether the process a claim file names is still the one that wrote it. */
export function claimOwnerAlive(content: string): boolean {
  const pid = Number(content.split(" ")[0]);
  return Number.isSafeInteger(pid) && pid > 0 && mark(pid) === content.trim();
}

export interface ClaimWait {
  /** The layer is there now (built by the other claimer). */
  hasLayer(): boolean;
  /** Told once when the builder starts to wait, then every `reportMs`, with the owner's pid. */
  onWait(ownerPid: number, first: boolean): void;
  pollMs?: number;
  reportMs?: number;
  signal?: AbortSignal;
}

/**
 * Claims layer `id` for building, or waits for another claimer's result. Resolves "cached" when
 * the layer appeared meanwhile, else a release function (call it once the step has ended,
 * published or not).
 */
export async function claimStep(layersDir: string, id: string, w: ClaimWait): Promise<"cached" | (() => void)> {
  const file = join(layersDir, `.claim-${id}`);
  let waitingSince: number | undefined;
  let reported = 0;
  for (;;) {
    if (w.hasLayer()) return "cached";
    try {
      writeFileSync(file, OWN, { flag: "wx" });
      return () => {
        if (read(file) === OWN) rmSync(file, { force: true });
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const owner = read(file);
    if (owner === undefined) continue;
    if (!claimOwnerAlive(owner)) {
      // Its builder died mid-step: take it over (checked again just before, so a claim made in
      // between by another waiter is left alone; a lost race means two builds, one layer kept).
      if (read(file) === owner) rmSync(file, { force: true });
      continue;
    }
    const now = Date.now();
    if (waitingSince === undefined || now - reported >= (w.reportMs ?? 60_000)) {
      w.onWait(Number(owner.split(" ")[0]), waitingSince === undefined);
      waitingSince ??= now;
      reported = now;
    }
    w.signal?.throwIfAborted();
    await new Promise((r) => setTimeout(r, w.pollMs ?? 500));
  }
}

function read(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return undefined;
  }
}

/** Claims left by dead builders (the step's layer was never published), for the start-up sweep. */
export function removeDeadClaims(layersDir: string, names: string[]): void {
  for (const name of names) {
    if (!name.startsWith(".claim-")) continue;
    const owner = read(join(layersDir, name));
    if (owner !== undefined && !claimOwnerAlive(owner)) rmSync(join(layersDir, name), { force: true });
  }
}
