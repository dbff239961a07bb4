// What the local driver remembers about one sandbox, in `<dataDir>/sandboxes/<id>/record.json`.
// Written before anything is created and rewritten after each step, so an agent killed at any
// point leaves a record the next agent can act on.
//
// The file holds two slots: slot 0 up to the file's first newline (JSON.stringify writes none,
// nor does UTF-8 inside a character), slot 1 after it, each `{"seq":n,"record":{..},"end":n}`
// padded with spaces; the valid slot with the higher n holds the record. A write overwrites the
// other slot in place, in one write, never shorter than what the slot held (no truncate: a
// truncate then a write makes ext4 flush the data at close, auto_da_alloc). A slot torn by a kill
// mid-write fails to parse or its two numbers differ (its pages land in order, and what it held
// before ends with an older number, or is itself torn), and the other slot holds the record
// before. Only a sandbox's first write makes a file (aside, then renamed into place), and so
// does one replacing a plain record or one too long for slot 0 (8 KiB, or the power of two it
// grew to): one inode per sandbox where each write made one and freed the one it replaced, and
// on ext4 without a journal each new inode scans the inodes freed in the last minute (issue 16).
// No fsync, as before: a record survives the agent, not the host; and a host crash with two
// writes in its writeback window can leave neither slot whole, where a rename over the file was
// in practice old or new (ext4 flushes a file renamed over another).
//
// The plain format (one JSON value; agents before b1d5c270 wrote only it) is read too, whole, with
// newlines in it or not (a record written by hand, as `jq .` prints it). Agents before b1d5c270
// cannot read the slots: they take such a file for no record, or for a slot's wrapper. Address and
// uid-range leases are judged host-wide from the record each names, so such an agent on the same
// host would take over a live sandbox's lease, and one started on this data directory would lose
// every sandbox: no driver older than b1d5c270 (an agent, a test suite or a bench: each runs a
// LocalDriver on the host-wide leases) may run on a host with this one, and upgrades roll
// through b1d5c270 (which reads both and writes the plain file).
//
// One writer per record file is assumed (its driver): what this process wrote last is kept, to
// write on without parsing the file, and checked against it before each write (a newline where
// slot 0 ends, the slot written last opening with its number, the slot written next not opening
// with the number this write takes: two small preads); a file another process wrote meanwhile is
// read again first. So two agents writing one data directory (a mistake) leave a whole record
// that was written, the last one unless two writes race, as the plain file's rename did; without
// the checks one could write through the other's slot 0 and leave none, or over the other's slot
// of the same number, which a kill then left half one record, half the other, parsing whole.
import { closeSync, constants, fstatSync, openSync, readFileSync, readSync, readdirSync, renameSync, writeSync } from "node:fs";
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

const NL = 0x0a;
const SLOT0_BYTES = 8192;

/** What a write needs to know of a file: the newest valid slot's number and which slot holds it,
 * and where slot 1 starts (0: not a two-slot file; the next write makes a new file). */
interface Slots {
  seq: number;
  at: 0 | 1;
  slot0: number;
}

/** Of each record file this process wrote, until its sandbox is destroyed (forgetRecord). */
const written = new Map<string, Slots>();

export function readRecord(file: string): SandboxRecord | undefined {
  let buf: Buffer;
  try {
    buf = readFileSync(file);
  } catch {
    return undefined;
  }
  return readSlots(buf).record;
}

function readSlots(buf: Buffer): { record?: SandboxRecord } & Slots {
  const cut = buf.indexOf(NL);
  const first = parse(buf.toString("utf8", 0, cut < 0 ? buf.length : cut));
  const a = slot(first);
  const b = cut < 0 ? undefined : slot(parse(buf.toString("utf8", cut + 1)));
  const newest = a && b ? (a.seq > b.seq ? a : b) : (a ?? b);
  if (newest) {
    return { record: newest.record, seq: newest.seq, at: newest === a ? 0 : 1, slot0: cut + 1 };
  }
  // The plain format.
  const plain = cut < 0 ? first : parse(buf.toString("utf8"));
  // A slot's wrapper is not a record (a record has no `record`): one slot, torn, the other blank.
  const record = typeof plain === "object" && plain !== null && !("record" in plain) ? (plain as SandboxRecord) : undefined;
  return { record, seq: 0, at: 0, slot0: 0 };
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    // Torn by an agent killed mid-write, or blank.
    return undefined;
  }
}

/** A slot of the two-slot format, if `value` is a whole one. */
function slot(value: unknown): { seq: number; record: SandboxRecord } | undefined {
  const v = value as { seq?: unknown; record?: unknown; end?: unknown } | undefined;
  if (typeof v !== "object" || v === null || !Number.isSafeInteger(v.seq) || v.seq !== v.end) return undefined;
  if (typeof v.record !== "object" || v.record === null) return undefined;
  return { seq: v.seq as number, record: v.record as SandboxRecord };
}

const wrap = (seq: number, json: string) => Buffer.from(`{"seq":${seq},"record":${json},"end":${seq}}`);

export function writeRecord(file: string, record: SandboxRecord): void {
  const json = JSON.stringify(record);
  let fd: number;
  try {
    // Never through a link planted in the record's place.
    fd = openSync(file, constants.O_RDWR | constants.O_NOFOLLOW);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    return writeNew(file, 1, wrap(1, json));
  }
  try {
    const kept = written.get(file);
    let s = kept;
    if (!s || !unchanged(fd, s)) {
      s = readSlots(readFileSync(fd));
      if (kept && s.slot0 === 0) warnPlain(file);
    }
    const seq = s.seq + 1;
    const slot = wrap(seq, json);
    const to = s.at === 0 ? 1 : 0;
    if (s.slot0 === 0 || (to === 0 && slot.length >= s.slot0)) return writeNew(file, seq, slot);
    // Slot 0 whole to its newline; slot 1 to the file's end (what is left after it would be junk).
    const out = Buffer.alloc(to === 0 ? s.slot0 : Math.max(slot.length, fstatSync(fd).size - s.slot0), " ");
    slot.copy(out);
    if (to === 0) out[out.length - 1] = NL;
    const at = to === 0 ? 0 : s.slot0;
    for (let off = 0; off < out.length; ) off += writeSync(fd, out, off, out.length - off, at + off);
    written.set(file, { seq, at: to, slot0: s.slot0 });
  } finally {
    closeSync(fd);
  }
}

/** Whether the file is as this process left it: a newline where slot 0 ends, the slot it wrote
 * last still opening with its number, and the slot it writes next not opening with the number it
 * takes. The last: another writer's slot of that number, overwritten by this one's and torn by a
 * kill, would parse whole, half one record and half the other (review M1 of session 32). Not the
 * inode: ext4 gives a freed number to the next file at once, so a file removed and made again by
 * another process often has the same. */
function unchanged(fd: number, s: Slots): boolean {
  const last = Buffer.from(`{"seq":${s.seq},"record":`);
  const next = Buffer.from(`{"seq":${s.seq + 1},"record":`);
  // Slot 1 opens right after slot 0's newline: one pread reads both. Each head in a buffer of its
  // own length (the next number may have a digit more: 9, then 10).
  const [one, zero] = s.at === 1 ? [last, next] : [next, last];
  const b = Buffer.alloc(1 + one.length);
  const n = readSync(fd, b, 0, b.length, s.slot0 - 1);
  if (b[0] !== NL) return false;
  const z = Buffer.alloc(zero.length);
  const slot0Opens = readSync(fd, z, 0, z.length, 0) === z.length && z.equals(zero);
  const slot1Opens = n === b.length && b.subarray(1).equals(one);
  return s.at === 1 ? slot1Opens && !slot0Opens : slot0Opens && !slot1Opens;
}

let warnedPlain = false;
/** A plain record where this process had written slots: only an agent, test suite or bench older
 * than b1d5c270 (or a hand) writes one, and such a driver reads none of this one's records.
 * Nothing here can stop it; a line in the log is the only sign. Once per process. */
function warnPlain(file: string): void {
  if (warnedPlain) return;
  warnedPlain = true;
  console.warn(`local driver: ${file}: a plain record where this agent had written a two-slot one: a driver older than b1d5c270 (agent, test suite or bench) writes this data directory, and cannot read this agent's records (drivers/README.md, Upgrading)`);
}

/** A new file with the record in slot 0: the sandbox's first write, a plain record replaced, or a
 * record grown past slot 0. Made aside and renamed, as the record in the file stays whole until
 * the new one is. */
function writeNew(file: string, seq: number, slot: Buffer): void {
  const slot0 = Math.max(SLOT0_BYTES, 2 ** Math.ceil(Math.log2(slot.length + 1)));
  const body = Buffer.alloc(slot0, " ");
  slot.copy(body);
  body[slot0 - 1] = NL;
  const tmp = `${file}.${process.pid}.tmp`;
  // Only the agent reads records: the data directory lets sandboxes' host uids pass (userns.ts).
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o600);
  try {
    for (let off = 0; off < body.length; ) off += writeSync(fd, body, off, body.length - off);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  written.set(file, { seq, at: 0, slot0 });
}

/** Drops what the writer kept of a record whose sandbox is gone. Memory only: a sandbox made again
 * under that id finds no file, and its first write makes one afresh. */
export function forgetRecord(file: string): void {
  written.delete(file);
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
