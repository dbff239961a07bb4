// What the local driver remembers about one sandbox, in `<dataDir>/sandboxes/<id>/record.json`.
// Written before anything is created and rewritten after each step, atomically (write + rename),
// so an agent killed at any point leaves a record the next agent can act on.
import { readFileSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { DesiredSandbox, IsolationLevel } from "../driver.ts";
import type { CgroupSet } from "./cgroups.ts";
import type { RootRecord } from "./root-overlay.ts";
import type { IdRange } from "./uid-range.ts";

/** A live process, identified by pid and kernel start time (so a reused pid is not mistaken). */
export interface ProcRef {
  pid: number;
  start: string;
}

export interface SandboxRecord {
  id: string;
  generation: number;
  level: IsolationLevel;
  desired: DesiredSandbox;
  createdAt: string;
  /** Pending: holder being started. Running: holder started. Frozen: paused by Freeze at a level
   * whose freeze state cannot be read back from the kernel. Stopped: paused by Stop. */
  phase: "Pending" | "Running" | "Frozen" | "Stopped";
  cgroups?: CgroupSet;
  /** The process the driver spawned (bwrap, or the plain holder at `process` level). */
  holder?: ProcRef;
  /** The process whose namespaces sandbox processes join (the sandbox's pid 1). */
  nsInit?: ProcRef;
  /** A random value in its holder's environment (holder.ts: HOLDER_NONCE_ENV), new for each holder
   * start and recorded before it: a holder lost by its record is found only with it, which no
   * other tenant knows at bwrap levels (this file is root's, 0600; only the holder, and the
   * sandbox's own pid 1 and its sleep, carry it). At `process` level nothing separates tenants: a
   * command run as uid 0 owns this file too. Absent: a record of an older agent, whose holder is found by
   * its id and command line alone. */
  holderNonce?: string;
  /** The holder was started on the host's network (`--share-net`). Absent in records written
   * before sandboxes with internet access got a namespace of their own: then it follows from
   * the desired network. */
  sharesHostNet?: boolean;
  /** Its address on the sandbox bridge (sandbox-net.ts), leased until destroy. */
  net?: SandboxAddress;
  /** Its own disk (disk.ts), which holds its layer and /etc; absent: they are in the data
   * directory without a limit (a host without loop mounts, or a record of an older agent). */
  disk?: { sizeMB: number };
  /** Its `/` is an overlay of these template layers (root-overlay.ts); absent: the host view
   * (`base` not built yet when it was created, `process` level, or a record of an older agent). */
  root?: RootRecord;
  /** The host ids its user namespace maps its 0..65535 to (uid-range.ts), leased until destroy;
   * absent: no user namespace (`process` level, turned off, or a record of an older agent). */
  userns?: IdRange;
  /** Its files still carry host ids (an agent without user namespaces made it) and move into
   * `userns` before its holder starts (#start); kept until the move is done, so an agent stopped
   * midway finishes it. */
  hostOwned?: true;
  /** The seccomp filter its holder was started with, which its commands load too (seccomp.ts);
   * absent: the default, or none (turned off, `process` level, or a holder of an older agent,
   * which the driver looks at when it adopts it). */
  filter?: FilterKind;
}

/** `nestedUserns`: the filter of a template with `nestedUserNamespaces` (no CLONE_NEWUSER rules). */
export type FilterKind = "default" | "nestedUserns";

/** Where a sandbox with internet access is on the sandbox bridge. */
export interface SandboxAddress {
  address: string;
  /** The host end of its veth, while one is attached. */
  veth?: string;
}

export function readRecord(file: string): SandboxRecord | undefined {
  try {
    return JSON.parse(readFileSync(file, "utf8")) as SandboxRecord;
  } catch {
    return undefined;
  }
}

export function writeRecord(file: string, record: SandboxRecord): void {
  const tmp = `${file}.${process.pid}.tmp`;
  // Only the agent reads records: the data directory lets sandboxes' host uids pass (userns.ts).
  writeFileSync(tmp, JSON.stringify(record), { mode: 0o600 });
  renameSync(tmp, file);
}

export function recordedIds(dataDir: string): string[] {
  try {
    return readdirSync(join(dataDir, "sandboxes"), { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => d.name);
  } catch {
    return [];
  }
}
