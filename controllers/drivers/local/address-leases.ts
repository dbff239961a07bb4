// Leases held host-wide (sandbox addresses; uid ranges, uid-range.ts): one file per lease in a
// directory under /run, naming the record of the sandbox that holds it, because several drivers
// (agents, test suites) share the bridge and the host's uids. Creating a lease is one exclusive create; taking over a stale one (its record is gone or
// names another address) is a compare-and-swap under flock on the directory, so two drivers never
// both take the same stale lease (Node has no flock: a short perl does it, and only then).
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { helperEnv, PERL } from "./host-helpers.ts";
import { readRecord } from "./records.ts";

/** A lease younger than this is never taken over: its record may not be written yet. */
const LEASE_GRACE_MS = 60_000;

/** Replaces the lease file ARGV[1] by ARGV[3] if it still holds ARGV[2], under an exclusive flock
 * of its directory ARGV[0]; exit 0 when it did. */
const TAKEOVER = `
my ($dir, $file, $was, $now) = @ARGV;
open(my $d, '<', $dir) or exit 2;
flock($d, 2) or exit 2;
open(my $f, '<', $file) or exit 1;
my $held = do { local $/; <$f> };
exit 1 unless defined $held && $held eq $was;
open(my $t, '>', "$file.$$") or exit 2;
print $t $now;
close $t or exit 2;
rename("$file.$$", $file) or exit 2;
exit 0;
`;

/** An IPv4 address from its number (the lease arithmetic works on numbers). */
export const toIp = (n: number) => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join(".");

/** What distinguishes one kind of host-wide lease: the names of its leases and when a lease is
 * still its record's. */
export interface LeaseKind {
  /** Lease names are `name(offset)` for offsets first..last. */
  first: number;
  last: number;
  name: (offset: number) => string;
  /** Whether the sandbox whose record is `recordFile` still uses the lease `name`. */
  held: (recordFile: string, name: string) => boolean;
  /** Says what ran out. */
  exhausted: string;
}

/** Leases of one kind, one file each in `dir`. */
export class FileLeases {
  readonly #dir: string;
  readonly #kind: LeaseKind;
  /** Offset tried next: leasing walks the range instead of re-trying the low ones. */
  #hint: number;

  constructor(dir: string, kind: LeaseKind) {
    this.#dir = dir;
    this.#kind = kind;
    this.#hint = kind.first;
  }

  /** Makes the lease directory (0700: leases name records, which only the agent reads). */
  open(): void {
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
  }

  /** A free lease for the sandbox whose record is `recordFile`; `usable` may pass over some. A
   * lease whose record is gone or no longer names it (a driver that stopped without destroying)
   * is taken over once it is older than a minute. */
  lease(recordFile: string, usable: (offset: number) => boolean = () => true): string {
    const { first, last } = this.#kind;
    for (let tried = 0; tried <= last - first; tried++) {
      const offset = this.#hint;
      this.#hint = this.#hint + 1 > last ? first : this.#hint + 1;
      if (!usable(offset)) continue;
      const name = this.#kind.name(offset);
      if (this.#take(name, recordFile)) return name;
    }
    throw new Error(this.#kind.exhausted);
  }

  /** `name` (the one the sandbox's record keeps) if its lease is, or can again be, this
   * sandbox's; otherwise a new one. Leases live in /run and vanish with a reboot while records
   * stay, and another sandbox may have leased the same since. */
  keep(name: string | undefined, recordFile: string, usable?: (offset: number) => boolean): string {
    if (name && this.#take(name, recordFile)) return name;
    return this.lease(recordFile, usable);
  }

  /** Whether the lease `name` is now `recordFile`'s: created, already its own, or taken over. */
  #take(name: string, recordFile: string): boolean {
    const file = join(this.#dir, name);
    try {
      writeFileSync(file, recordFile, { flag: "wx", mode: 0o600 });
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const held = this.#holder(file);
    if (held === recordFile) return true;
    if (held === undefined || !this.#stale(file, held, name)) return false;
    const r = spawnSync(PERL, ["-e", TAKEOVER, this.#dir, file, held, recordFile], { env: helperEnv(), timeout: 10_000 });
    return r.status === 0;
  }

  #holder(file: string): string | undefined {
    try {
      return readFileSync(file, "utf8");
    } catch {
      return undefined;
    }
  }

  #stale(file: string, held: string, name: string): boolean {
    try {
      if (Date.now() - statSync(file).mtimeMs < LEASE_GRACE_MS) return false;
    } catch {
      return false;
    }
    return !this.#kind.held(held, name);
  }

  /** Frees `name` if `recordFile` holds it (another driver may have taken it over). */
  release(name: string | undefined, recordFile: string): void {
    if (!name) return;
    const file = join(this.#dir, name);
    if (this.#holder(file) !== recordFile) return;
    try {
      unlinkSync(file);
    } catch {
      // already released
    }
  }
}

/** Sandbox addresses of the range `base`/`prefix` (the bridge takes offset 1), leased in `dir`. */
export class AddressLeases extends FileLeases {
  constructor(dir: string, base: number, prefix: number) {
    const size = 2 ** (32 - prefix);
    super(dir, {
      first: 2,
      last: size - 2,
      name: (offset) => toIp(base + offset),
      held: (recordFile, ip) => readRecord(recordFile)?.net?.address === ip,
      exhausted: `no free sandbox address left in ${toIp(base)}/${prefix}`,
    });
  }
}
