// Environment variables that make a program run code of the caller's choosing at its start
// (perl, the dynamic loader, shells, node, python), each aimed at a payload in a directory on the
// HOST that a sandbox cannot see. A host-side helper that starts with them leaves a file behind
// there (or, for the loader, an error naming a file only the host has); the sandboxed command
// must still receive every one of them, unchanged, because the user asked for them.
import { chmodSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface HostileEnv {
  /** The host directory with the payloads; the sandbox does not see it. */
  dir: string;
  env: Record<string, string>;
  /** Files that appeared in `dir` since it was made: proof that some host process ran a payload. */
  ran(): string[];
  dispose(): void;
}

/** What the host's dynamic loader says when it tried to preload the payload (a file that is not
 * ELF). Inside the sandbox the path does not exist, so the loader there says "cannot open". */
export const HOST_LOADER_SAW_IT = "invalid ELF header";

export function hostileEnv(): HostileEnv {
  const dir = mkdtempSync(join(tmpdir(), "hostile-env-"));
  // Readable by every user: a helper that has already dropped privileges must still be able to
  // run the payload for the test to see it.
  chmodSync(dir, 0o777);
  const mark = (name: string) => join(dir, `ran-${name}`);
  const payloads: Record<string, string> = {
    "KruiseHostMarker.pm": `open(my $f, '>', '${mark("perl5lib")}'); 1;\n`,
    "bash-env.sh": `touch ${mark("bash-env")}\n`,
    "sh-env.sh": `touch ${mark("sh-env")}\n`,
    "node-options.cjs": `require("fs").writeFileSync(${JSON.stringify(mark("node-options"))}, "");\n`,
    "python-startup.py": `open(${JSON.stringify(mark("python-startup"))}, "w")\n`,
    // Longer than an ELF header: a shorter file makes the loader say "file too short" instead.
    "not-elf.so": "not a shared object\n".repeat(64),
  };
  for (const [name, text] of Object.entries(payloads)) writeFileSync(join(dir, name), text, { mode: 0o644 });
  const before = new Set(readdirSync(dir));
  const env = {
    PERL5OPT: "-d -MKruiseHostMarker",
    PERL5LIB: dir,
    PERL5DB: `BEGIN { open(my $f, '>', '${mark("perl5db")}') }`,
    LD_PRELOAD: join(dir, "not-elf.so"),
    LD_LIBRARY_PATH: dir,
    BASH_ENV: join(dir, "bash-env.sh"),
    ENV: join(dir, "sh-env.sh"),
    NODE_OPTIONS: `--require ${join(dir, "node-options.cjs")}`,
    PYTHONSTARTUP: join(dir, "python-startup.py"),
  };
  return {
    dir,
    env,
    ran: () => readdirSync(dir).filter((f) => !before.has(f)),
    dispose: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** `env -0` output (NUL-separated, so values may hold newlines) as a map. */
export function parseEnv0(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of text.split("\0")) {
    const eq = entry.indexOf("=");
    if (eq > 0) out[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  return out;
}
