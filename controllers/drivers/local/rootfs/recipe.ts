// The `base` template's recipe: everything that decides what mmdebstrap builds. Its hash is the
// cache key, so changing any field (or customize.sh) builds a new layer beside the old one.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";

export interface DebianRecipe {
  suite: string;
  variant: "minbase";
  architecture: string;
  /** One-line sources, in apt's order; fixed suites (point releases and security updates land in
   * them, so a rebuild elsewhere may pick newer versions: the manifest records which). */
  sources: string[];
  /** Sorted, no duplicates: the order must not change the key. */
  packages: string[];
  /** Paths dpkg leaves out (the list of Debian's slim images); copyright files stay. */
  dpkgOptions: string[];
  /** Clamps the timestamps mmdebstrap and useradd write (shadow's last-change day, logs). */
  sourceDateEpoch: number;
  /** The hook that adds `user`; its text is part of the key. */
  customize: string;
}

const MIRROR = process.env.SBX_ROOTFS_MIRROR ?? "http://deb.debian.org/debian";
const SECURITY = process.env.SBX_ROOTFS_SECURITY_MIRROR ?? "http://deb.debian.org/debian-security";

/** What E2B's `base` image has that a sandbox user reaches for first. */
const BASE_PACKAGES = [
  "bash", "ca-certificates", "coreutils", "curl", "git", "iproute2", "nodejs", "npm", "passwd",
  "procps", "python-is-python3", "python3", "python3-pip", "python3-venv", "sudo",
];

export const CUSTOMIZE_SCRIPT = join(import.meta.dirname, "customize.sh");

export function baseRecipe(): DebianRecipe {
  return {
    suite: "bookworm",
    variant: "minbase",
    architecture: "amd64",
    sources: [
      `deb ${MIRROR} bookworm main`,
      `deb ${MIRROR} bookworm-updates main`,
      `deb ${SECURITY} bookworm-security main`,
    ],
    packages: [...new Set(BASE_PACKAGES)].sort(),
    dpkgOptions: [
      ...["doc", "groff", "info", "linda", "lintian", "locale", "man"].map((d) => `path-exclude=/usr/share/${d}/*`),
      "path-include=/usr/share/doc/*/copyright",
      // PEP 668's marker: without it `pip install` works as in E2B's base (a Docker python, no
      // marker): as user into ~/.local, with sudo into /usr/local. An exclude, not a delete in the
      // hook, so an `apt-get upgrade` inside a sandbox does not put it back.
      "path-exclude=/usr/lib/python3*/EXTERNALLY-MANAGED",
    ],
    // 2026-12-01T00:00:00Z: a fixed instant, not the build's.
    sourceDateEpoch: 1_796_083_200,
    customize: readFileSync(CUSTOMIZE_SCRIPT, "utf8"),
  };
}

/** sha256 of the recipe's canonical JSON (keys in declaration order, which is fixed above). */
export function recipeKey(recipe: DebianRecipe): string {
  return createHash("sha256").update(JSON.stringify(recipe)).digest("hex").slice(0, 24);
}

/** mmdebstrap's arguments for a recipe, building into `target` (a directory that must not exist
 * or be empty). Runs as root (`--mode=root`): no newuidmap is needed and owners are real. */
export function mmdebstrapArgs(recipe: DebianRecipe, target: string): string[] {
  return [
    "--mode=root",
    "--format=directory",
    // apt's and dpkg's lines too: the only sign of progress while 500 packages are configured
    // (build-base.ts keeps a count of them, not the lines).
    "--verbose",
    `--variant=${recipe.variant}`,
    `--architectures=${recipe.architecture}`,
    `--include=${recipe.packages.join(",")}`,
    ...recipe.dpkgOptions.map((o) => `--dpkgopt=${o}`),
    '--aptopt=Acquire::Retries "3"',
    `--customize-hook=sh -eu ${CUSTOMIZE_SCRIPT} "$1"`,
    recipe.suite,
    target,
    ...recipe.sources,
  ];
}
