// Sandbox addresses leased host-wide: one file per address in a directory under /run, naming the
// record of the sandbox that holds it, because several drivers (agents, test suites) may share a
// bridge. Creating a lease is one exclusive create; taking over a stale one (its record is gone or
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

export class AddressLeases {
  readonly #dir: string;
  readonly #base: number;
  readonly #size: number;
  /** Offset tried next: leasing walks the range instead of re-trying the low addresses. */
  #hint = 2;

  /** Leases of the range `base`/`prefix` (the bridge takes offset 1) in `dir`. */
  constructor(dir: string, base: number, prefix: number) {
    this.#dir = dir;
    this.#base = base;
    this.#size = 2 ** (32 - prefix);
  }

  /** Makes the lease directory (0700: leases name records, which only the agent reads). */
  open(): void {
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
  }

  /** A free address, leased to the sandbox whose record is `recordFile`. A lease whose record is
   * gone or names another address (a driver that stopped without destroying) is taken over once
   * it is older than a minute. */
  lease(recordFile: string): string {
    for (let tried = 0; tried < this.#size - 3; tried++) {
      const offset = this.#hint;
      this.#hint = this.#hint + 1 >= this.#size - 1 ? 2 : this.#hint + 1;
      const ip = toIp(this.#base + offset);
      if (this.#take(ip, recordFile)) return ip;
    }
    throw new Error(`no free sandbox address left in ${toIp(this.#base)}/${32 - Math.log2(this.#size)}`);
  }

  /** `address` (the one the sandbox's record keeps) if its lease is, or can again be, this
   * sandbox's; otherwise a new address. Leases live in /run and vanish with a reboot while
   * records stay, and another sandbox may have leased the address since. */
  keep(address: string | undefined, recordFile: string): string {
    if (address && this.#take(address, recordFile)) return address;
    return this.lease(recordFile);
  }

  /** Whether the lease of `ip` is now `recordFile`'s: created, already its own, or taken over. */
  #take(ip: string, recordFile: string): boolean {
    const file = join(this.#dir, ip);
    try {
      writeFileSync(file, recordFile, { flag: "wx", mode: 0o600 });
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const held = this.#holder(file);
    if (held === recordFile) return true;
    if (held === undefined || !this.#stale(file, held, ip)) return false;
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

  #stale(file: string, held: string, ip: string): boolean {
    try {
      if (Date.now() - statSync(file).mtimeMs < LEASE_GRACE_MS) return false;
    } catch {
      return false;
    }
    return readRecord(held)?.net?.address !== ip;
  }

  /** Frees `address` if `recordFile` holds it (another driver may have taken it over). */
  release(address: string | undefined, recordFile: string): void {
    if (!address) return;
    const file = join(this.#dir, address);
    if (this.#holder(file) !== recordFile) return;
    try {
      unlinkSync(file);
    } catch {
      // already released
    }
  }
}
