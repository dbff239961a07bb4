// Host uid/gid ranges for sandboxes with a user namespace: each gets 65536 ids of its own
// (`base + slot * 65536`, base 2^20 by default), which its 0..65535 map to. A range is leased
// host-wide (one file per slot under /run/kruise-uids, naming the sandbox's record: several
// drivers share the host's ids) and kept in the record, so an agent restart, a Stop pause and a
// reboot (leases in /run vanish, records stay) keep a sandbox's files owned as they were. No
// range ever includes a host user's or group's id, nor one the host hands out for its own user
// namespaces (/etc/subuid, /etc/subgid); no range includes host root.
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
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
/** Where the host's users, groups and subordinate ranges are (hostIdRanges). */
const HOST_ID_FILES = ["/etc/passwd", "/etc/group", "/etc/subuid", "/etc/subgid"];

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
  for (const file of HOST_ID_FILES.slice(0, 2)) {
    for (const line of (read(file) ?? "").split("\n")) {
      const f = line.split(":");
      for (const v of file === "/etc/passwd" ? [f[2], f[3]] : [f[2]]) if (v && /^\d+$/.test(v)) out.push({ base: Number(v), size: 1 });
    }
  }
  for (const file of HOST_ID_FILES.slice(2)) {
    for (const line of (read(file) ?? "").split("\n")) {
      const f = line.split(":");
      if (f.length === 3 && /^\d+$/.test(f[1]!) && /^\d+$/.test(f[2]!)) out.push({ base: Number(f[1]), size: Number(f[2]) });
    }
  }
  return out;
}

/** A file whose change is younger than this at a look may change again with the same stamp (its
 * kernel's timestamps are coarse): what was read then is read again at the next look. */
const RACY_MS = 2000;

/**
 * hostIdRanges of the host under `root`, read again only when one of its four files changed: their
 * inode, size, modification and change times (ns) stamp what was read, and a file changed within
 * RACY_MS of the look is read again next time too (as git treats a racily clean index). Each new
 * sandbox's range lease read and parsed all four (issue 16: ~60 µs warm on the agent's event loop
 * per refill, several times that cold); four stats are ~10 µs. A host user or subordinate range
 * added later still counts from the next lease on, as before.
 */
export class HostIds {
  readonly #root: string;
  readonly #now: () => number;
  #stamp: string | undefined;
  #ranges: IdRange[] = [];

  constructor(root = "/", now = Date.now) {
    this.#root = root;
    this.#now = now;
  }

  ranges(): IdRange[] {
    const settled = BigInt(this.#now() - RACY_MS) * 1_000_000n;
    let racy = false;
    const stamp = HOST_ID_FILES.map((f) => {
      const st = statSync(join(this.#root, f), { bigint: true, throwIfNoEntry: false });
      if (!st) return "-";
      if (st.ctimeNs > settled || st.mtimeNs > settled) racy = true;
      return `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
    }).join(" ");
    if (stamp === this.#stamp) return this.#ranges;
    // Stamped before the read: a change in between reads again next time, never the other way.
    this.#ranges = hostIdRanges((f) => readOr(join(this.#root, f)));
    this.#stamp = racy ? undefined : stamp;
    return this.#ranges;
  }
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
  readonly #host: HostIds;

  constructor(base = DEFAULT_UID_BASE, dir = LEASE_DIR, host = new HostIds()) {
    if (!Number.isInteger(base) || base < 1 || slotCount(base) < 1) throw new Error(`uid base ${base} leaves no room for a range of ${RANGE_SIZE} ids`);
    this.#base = base;
    this.#host = host;
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
    const host = this.#host.ranges();
    const usable = (slot: number) => usableSlot(this.#base, slot, host);
    const keepName = recorded && !host.some((h) => overlaps(h, recorded)) ? String(recorded.base) : undefined;
    return { base: Number(this.#leases.keep(keepName, recordFile, usable)), size: RANGE_SIZE };
  }

  release(range: IdRange | undefined, recordFile: string): void {
    this.#leases.release(range && String(range.base), recordFile);
  }
}
