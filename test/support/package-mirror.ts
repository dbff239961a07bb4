// A package mirror stand-in for tests that install software inside a sandbox without any public
// host: an apt repository (a flat one: Packages and Release, used with `[trusted=yes]`) and a PyPI
// "simple" index, both served over HTTP from a network namespace of this machine
// (outside-net.ts), with packages the test builds on the host: a .deb made by dpkg-deb holding
// one executable, and a pure-Python wheel made with zipfile.
//
//   const mirror = await startPackageMirror();
//   const deb = mirror.addDeb({ name: "hello-mirror", script: "echo hi" });   // /usr/bin/hello-mirror
//   const whl = mirror.addWheel({ name: "mirror_pkg", module: "VALUE = 1" });
//   ... inside: echo "${mirror.aptSource}" > /etc/apt/sources.list.d/mirror.list; apt-get install -y hello-mirror
//   ...         pip install --index-url ${mirror.pipIndex} --trusted-host ${mirror.ip} mirror_pkg
//   const repo = mirror.addGitRepo({ name: "demo", files: { "README": "hi" } });  // git clone <repo>
//   mirror.addNpm({ name: "mirror-npm", main: "module.exports = 1" });  // npm install --registry ${mirror.npmRegistry}
//   mirror.stop();
//
// Packages can be added after start: the indexes are rewritten on each add and the server reads
// files as they are asked for.
import { execFileSync, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { serveIn, startOutside, type Outside } from "./outside-net.ts";

export const MIRROR_PORT = 8080;

/** python's http.server on a directory, without a log line per request. */
const FILE_SERVER = `
import functools, http.server, sys
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), functools.partial(Quiet, directory=sys.argv[2])).serve_forever()
`;

export interface DebSpec {
  /** Debian package name: lowercase letters, digits, `-`, `+`, `.`; also the executable's name. */
  name: string;
  version?: string;
  /** The body of /usr/bin/<name> (a sh script). */
  script: string;
}

export interface WheelSpec {
  /** Distribution and import name: letters, digits and `_`. */
  name: string;
  version?: string;
  /** The text of <name>/__init__.py. */
  module: string;
}

export interface GitRepoSpec {
  /** Repository name: letters, digits, `-`, `_`. */
  name: string;
  /** Path → text of the one commit's files. */
  files: Record<string, string>;
}

export interface NpmSpec {
  /** Unscoped npm package name: lowercase letters, digits, `-`. */
  name: string;
  version?: string;
  /** The text of index.js. */
  main: string;
}

export interface PackageMirror {
  /** The mirror's address, as the sandbox reaches it. */
  ip: string;
  /** One sources.list line for the apt repository: `deb [trusted=yes] http://<ip>:8080/debian ./`. */
  aptSource: string;
  /** The PyPI simple index's URL, for `pip install --index-url` (with `--trusted-host <ip>`). */
  pipIndex: string;
  /** Builds a .deb of one executable into the apt repository; returns its file name. */
  addDeb(spec: DebSpec): string;
  /** Builds a pure-Python wheel into the simple index; returns its file name. */
  addWheel(spec: WheelSpec): string;
  /** The npm registry's URL (packuments and tarballs), for `npm install --registry`. */
  npmRegistry: string;
  /** A one-commit git repository served over git's dumb HTTP protocol; returns its clone URL. */
  addGitRepo(spec: GitRepoSpec): string;
  /** An npm package (one version, index.js) in the registry; returns its tarball's file name. */
  addNpm(spec: NpmSpec): string;
  stop(): void;
}

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const md5 = (b: Buffer) => createHash("md5").update(b).digest("hex");

export async function startPackageMirror(): Promise<PackageMirror> {
  const root = mkdtempSync(join(tmpdir(), "package-mirror-"));
  chmodSync(root, 0o755);
  const [debian, simple, files] = [join(root, "debian"), join(root, "simple"), join(root, "files")];
  for (const d of [debian, simple, files]) mkdirSync(d, { recursive: true });
  const stanzas: string[] = [];
  const wheels = new Map<string, string[]>();

  let outside: Outside | undefined;
  let server: ChildProcess | undefined;
  const stop = () => {
    server?.kill("SIGKILL");
    outside?.stop();
    rmSync(root, { recursive: true, force: true });
  };
  try {
    outside = await startOutside();
    server = await serveIn(outside, MIRROR_PORT, ["python3", "-c", FILE_SERVER, String(MIRROR_PORT), root]);
  } catch (err) {
    stop();
    throw err;
  }
  const ip = outside.ip;

  function writeAptIndex(): void {
    const packages = Buffer.from(stanzas.join("\n"));
    writeFileSync(join(debian, "Packages"), packages);
    const date = new Date().toUTCString().replace("GMT", "UTC");
    const release = [
      "Origin: package-mirror stand-in",
      "Label: package-mirror",
      `Date: ${date}`,
      "MD5Sum:",
      ` ${md5(packages)} ${packages.length} Packages`,
      "SHA256:",
      ` ${sha256(packages)} ${packages.length} Packages`,
      "",
    ].join("\n");
    writeFileSync(join(debian, "Release"), release);
  }

  function addDeb({ name, version = "1.0", script }: DebSpec): string {
    if (!/^[a-z0-9][a-z0-9+.-]+$/.test(name)) throw new Error(`not a Debian package name: ${name}`);
    const work = mkdtempSync(join(root, ".build-"));
    try {
      mkdirSync(join(work, "DEBIAN"));
      mkdirSync(join(work, "usr", "bin"), { recursive: true });
      const control = [`Package: ${name}`, `Version: ${version}`, "Architecture: all", "Maintainer: tests <tests@localhost>", "Section: misc", "Priority: optional", `Description: ${name}, built by a test`, ""].join("\n");
      writeFileSync(join(work, "DEBIAN", "control"), control);
      writeFileSync(join(work, "usr", "bin", name), `#!/bin/sh\n${script}\n`, { mode: 0o755 });
      const file = `${name}_${version}_all.deb`;
      execFileSync("dpkg-deb", ["--root-owner-group", "--build", work, join(debian, file)], { stdio: ["ignore", "ignore", "pipe"] });
      const deb = readFileSync(join(debian, file));
      stanzas.push(`${control.trimEnd()}\nFilename: ./${file}\nSize: ${statSync(join(debian, file)).size}\nMD5sum: ${md5(deb)}\nSHA256: ${sha256(deb)}\n`);
      writeAptIndex();
      return file;
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }

  function addWheel({ name, version = "1.0", module }: WheelSpec): string {
    if (!/^[A-Za-z0-9_]+$/.test(name)) throw new Error(`not a wheel name: ${name}`);
    const file = `${name}-${version}-py3-none-any.whl`;
    const dist = `${name}-${version}.dist-info`;
    const entries: Record<string, string> = {
      [`${name}/__init__.py`]: module,
      [`${dist}/METADATA`]: `Metadata-Version: 2.1\nName: ${name}\nVersion: ${version}\nSummary: ${name}, built by a test\n`,
      [`${dist}/WHEEL`]: "Wheel-Version: 1.0\nGenerator: package-mirror\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    };
    // RECORD lists every file with its urlsafe-base64 sha256 and size; its own line has neither.
    const record = Object.entries(entries).map(([path, text]) => {
      const digest = createHash("sha256").update(text).digest("base64url");
      return `${path},sha256=${digest},${Buffer.byteLength(text)}`;
    });
    entries[`${dist}/RECORD`] = `${[...record, `${dist}/RECORD,,`].join("\n")}\n`;
    execFileSync("python3", ["-c", "import json,sys,zipfile\nwith zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:\n  [z.writestr(k, v) for k, v in json.loads(sys.stdin.read()).items()]", join(files, file)], {
      input: JSON.stringify(entries),
      stdio: ["pipe", "ignore", "pipe"],
    });
    const project = name.toLowerCase().replace(/_/g, "-");
    const links = [...(wheels.get(project) ?? []), `<a href="../../files/${file}#sha256=${sha256(readFileSync(join(files, file)))}">${file}</a>`];
    wheels.set(project, links);
    mkdirSync(join(simple, project), { recursive: true });
    writeFileSync(join(simple, project, "index.html"), `<!DOCTYPE html>\n<html><body>\n${links.join("<br>\n")}\n</body></html>\n`);
    writeFileSync(join(simple, "index.html"), `<!DOCTYPE html>\n<html><body>\n${[...wheels.keys()].map((p) => `<a href="${p}/">${p}</a>`).join("<br>\n")}\n</body></html>\n`);
    return file;
  }

  function addGitRepo({ name, files: tree }: GitRepoSpec): string {
    if (!/^[A-Za-z0-9_-]+$/.test(name)) throw new Error(`not a repository name: ${name}`);
    const work = mkdtempSync(join(root, ".git-"));
    const git = (cwd: string, ...args: string[]) =>
      execFileSync("git", ["-c", "user.name=tests", "-c", "user.email=tests@localhost", "-c", "init.defaultBranch=main", ...args], { cwd, stdio: ["ignore", "ignore", "pipe"] });
    try {
      for (const [path, text] of Object.entries(tree)) {
        mkdirSync(join(work, path, ".."), { recursive: true });
        writeFileSync(join(work, path), text);
      }
      git(work, "init", "-q");
      git(work, "add", "-A");
      git(work, "commit", "-q", "-m", "stand-in");
      const bare = join(root, "git", `${name}.git`);
      mkdirSync(join(root, "git"), { recursive: true });
      git(root, "clone", "-q", "--bare", work, bare);
      // The dumb protocol reads info/refs and objects as plain files.
      git(bare, "update-server-info");
      return `http://${ip}:${MIRROR_PORT}/git/${name}.git`;
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }

  function addNpm({ name, version = "1.0.0", main }: NpmSpec): string {
    if (!/^[a-z0-9][a-z0-9-]*$/.test(name)) throw new Error(`not an npm package name: ${name}`);
    const work = mkdtempSync(join(root, ".npm-"));
    try {
      mkdirSync(join(work, "package"));
      const manifest = { name, version, main: "index.js" };
      writeFileSync(join(work, "package", "package.json"), JSON.stringify(manifest));
      writeFileSync(join(work, "package", "index.js"), main);
      const file = `${name}-${version}.tgz`;
      mkdirSync(join(root, "npm", "tarballs"), { recursive: true });
      const tgz = join(root, "npm", "tarballs", file);
      execFileSync("tar", ["-czf", tgz, "-C", work, "package"], { stdio: ["ignore", "ignore", "pipe"] });
      const body = readFileSync(tgz);
      const dist = {
        tarball: `http://${ip}:${MIRROR_PORT}/npm/tarballs/${file}`,
        shasum: createHash("sha1").update(body).digest("hex"),
        integrity: `sha512-${createHash("sha512").update(body).digest("base64")}`,
      };
      // The packument at /npm/<name>: what `npm install <name>` asks the registry for.
      const packument = { name, "dist-tags": { latest: version }, versions: { [version]: { ...manifest, dist } } };
      writeFileSync(join(root, "npm", name), JSON.stringify(packument));
      return file;
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }

  return {
    ip,
    npmRegistry: `http://${ip}:${MIRROR_PORT}/npm/`,
    addGitRepo,
    addNpm,
    aptSource: `deb [trusted=yes] http://${ip}:${MIRROR_PORT}/debian ./`,
    pipIndex: `http://${ip}:${MIRROR_PORT}/simple/`,
    addDeb,
    addWheel,
    stop,
  };
}
