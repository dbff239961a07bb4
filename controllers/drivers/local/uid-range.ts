// Host uid/gid ranges for sandboxes with a user namespace: each gets 65536 ids of its own
// (`base + slot * 65536`, base 2^20 by default), which its 0..65535 map to. A range is leased
// host-wide (one file per slot under /run/kruise-uids, naming the sandbox's record: several
// drivers share the host's ids) and kept in the record, so an agent restart, a Stop pause and a
// reboot (leases in /run vanish, records stay) keep a sandbox's files owned as they were. No
// range ever includes a host user's or group's id, nor one the host hands out for its own user
// namespaces (/etc/subuid, /etc/subgid); no range includes host root.
import { readFileSync } from "node:fs";
import { FileLeases } from "./address-leases.ts";
import type { IdMapping } from "./id-map.ts";
import { readRecord } from "./records.ts";

/** Ids a sandbox's user namespace maps: its `0..size-1` are the host's `base..base+size-1`. */
export type IdRange = IdMapping;

export const RANGE_SIZE = 65536;
/** Above any id a Debian-like host gives its users (< 2^16, or subuid ranges from 100000 that
 * the allocator steps over anyway). */
export const DEFAULT_UID_BASE = 2 ** 20;
const MAX_ID = 2 ** 32 - 2; // (uid_t)-1 is "no id"
const LEASE_DIR = "/run/kruise-uids";

/** The range of `slot` above `base`. */
export function slotRange(base: number, slot: number): IdRange {
  return { base: base + slot * RANGE_SIZE, size: RANGE_SIZE };
}

/** How many slots fit above `base` below the largest id. */
export function slotCount(base: number): number {
  return Math.floor((MAX_ID + 1 - base) / RANGE_SIZE);
}

export function overlaps(a: IdRange, b: IdRange): boolean {
  return a.base < b.base + b.size && b.base < a.base + a.size;
}

/** Ids and ranges the host uses: every uid and gid in /etc/passwd and /etc/group, and the
 * subordinate ranges in /etc/subuid and /etc/subgid. */
export function hostIdRanges(read: (file: string) => string | undefined = readOr): IdRange[] {
  const out: IdRange[] = [];
  for (const file of ["/etc/passwd", "/etc/group"]) {
    for (const line of (read(file) ?? "").split("\n")) {
      const f = line.split(":");
      for (const v of file === "/etc/passwd" ? [f[2], f[3]] : [f[2]]) if (v && /^\d+$/.test(v)) out.push({ base: Number(v), size: 1 });
    }
  }
  for (const file of ["/etc/subuid", "/etc/subgid"]) {
    for (const line of (read(file) ?? "").split("\n")) {
      const f = line.split(":");
      if (f.length === 3 && /^\d+$/.test(f[1]!) && /^\d+$/.test(f[2]!)) out.push({ base: Number(f[1]), size: Number(f[2]) });
    }
  }
  return out;
}

function readOr(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return undefined;
  }
}

/** Whether slot `slot` above `base` may be given to a sandbox: inside the id space, never id 0,
 * and clear of every host range. */
export function usableSlot(base: number, slot: number, host: IdRange[]): boolean {
  const r = slotRange(base, slot);
  if (r.base < 1 || r.base + r.size - 1 > MAX_ID) return false;
  return !host.some((h) => overlaps(h, r));
}

/** The uid ranges of one driver's sandboxes, leased host-wide. */
export class UidRanges {
  readonly #base: number;
  readonly #leases: FileLeases;

  constructor(base = DEFAULT_UID_BASE, dir = LEASE_DIR) {
    if (!Number.isInteger(base) || base < 1 || slotCount(base) < 1) throw new Error(`uid base ${base} leaves no room for a range of ${RANGE_SIZE} ids`);
    this.#base = base;
    this.#leases = new FileLeases(dir, {
      first: 0,
      last: slotCount(base) - 1,
      name: (slot) => String(base + slot * RANGE_SIZE),
      held: (recordFile, name) => readRecord(recordFile)?.userns?.base === Number(name),
      exhausted: `no free uid range of ${RANGE_SIZE} ids left above ${base}`,
    });
  }

  /** The range the record keeps if it is still (or again) this sandbox's, else a new one. */
  keep(recorded: IdRange | undefined, recordFile: string): IdRange {
    this.#leases.open();
    const host = hostIdRanges();
    const usable = (slot: number) => usableSlot(this.#base, slot, host);
    const keepName = recorded && !host.some((h) => overlaps(h, recorded)) ? String(recorded.base) : undefined;
    return { base: Number(this.#leases.keep(keepName, recordFile, usable)), size: RANGE_SIZE };
  }

  release(range: IdRange | undefined, recordFile: string): void {
    this.#leases.release(range && String(range.base), recordFile);
  }
}
