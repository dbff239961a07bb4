// Installing software into a sandbox's own system (issue 11.6), through the real e2b SDK against
// the whole local system: `sudo apt-get install -y` of a .deb and `pip install` of a wheel, both
// from a package mirror stand-in in a network namespace of this machine (package-mirror.ts),
// never a public host. The package's executable runs, `pip install` works without flags as user
// and with sudo (no PEP 668 marker, as on E2B), and the host's
// own system is untouched.
import { existsSync } from "node:fs";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPackageMirror, type PackageMirror } from "../support/package-mirror.ts";
import { e2b, uniqueTag } from "./sdk.ts";

let mirror: PackageMirror;
let sbx: Sandbox;
const tag = uniqueTag();
const deb = `hello-mirror-${tag}`;
const wheel = `mirror_pkg_${tag}`;
const userWheel = `mirror_user_pkg_${tag}`;

beforeAll(async () => {
  mirror = await startPackageMirror();
  mirror.addDeb({ name: deb, version: "1.2", script: `echo "hello from ${deb} as $(id -un)"` });
  mirror.addWheel({ name: wheel, version: "0.3", module: `VALUE = "${tag}"\n` });
  mirror.addWheel({ name: userWheel, version: "0.1", module: `VALUE = "user-${tag}"\n` });
  sbx = await Sandbox.create(e2b());
});

afterAll(async () => {
  await sbx?.kill().catch(() => false);
  mirror?.stop();
});

describe("installing packages into the sandbox's system", () => {
  it("sudo apt-get install -y from the mirror: its executable runs for user, dpkg knows it", async () => {
    // Only the mirror: the base's own sources (a public mirror) are moved out of apt's way.
    await sbx.commands.run(
      `sudo sh -c 'mkdir -p /root/apt-sources && mv /etc/apt/sources.list /etc/apt/sources.list.d/* /root/apt-sources/ 2>/dev/null; echo "${mirror.aptSource}" > /etc/apt/sources.list.d/mirror.list'`,
    );
    const install = await sbx.commands.run(`sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y ${deb}`, { timeoutMs: 120_000 });
    expect(install.stdout).toContain(`Setting up ${deb} (1.2)`);
    const run = await sbx.commands.run(`${deb} && command -v ${deb} && dpkg-query -W -f='\${Status} \${Version}' ${deb}`);
    expect(run.stdout).toBe(`hello from ${deb} as user\n/usr/bin/${deb}\ninstall ok installed 1.2`);
  });

  // E2B's base image (a Docker python) has no PEP 668 marker, so a plain `pip install` works there:
  // as user into ~/.local, with sudo into /usr/local. Debian's python has one (EXTERNALLY-MANAGED),
  // which base's recipe leaves out; with it both calls below fail with "externally-managed-environment".
  it("pip install as user, without flags: lands in ~/.local, python imports it", async () => {
    const install = await sbx.commands.run(
      `pip install --no-cache-dir --index-url ${mirror.pipIndex} --trusted-host ${mirror.ip} ${userWheel}`,
      { timeoutMs: 120_000 },
    );
    expect(install.stdout).toContain(`Successfully installed ${userWheel}-0.1`);
    const show = await sbx.commands.run(`pip show ${userWheel}`);
    expect(show.stdout).toMatch(/Location: \/home\/user\/\.local\/lib\/python3[.\d]*\/site-packages/);
    const imported = await sbx.commands.run(`cd / && python -c 'import ${userWheel}; print(${userWheel}.VALUE)'`);
    expect(imported.stdout).toBe(`user-${tag}\n`);
  });

  it("sudo pip install into the system, without --break-system-packages: pip show sees it, python imports it", async () => {
    const install = await sbx.commands.run(
      `sudo pip install --no-cache-dir --index-url ${mirror.pipIndex} --trusted-host ${mirror.ip} ${wheel}`,
      { timeoutMs: 120_000 },
    );
    expect(install.stdout).toContain(`Successfully installed ${wheel}-0.3`);
    const show = await sbx.commands.run(`pip show ${wheel}`);
    expect(show.stdout).toContain(`Name: ${wheel}\nVersion: 0.3\n`);
    expect(show.stdout).toMatch(/Location: \/usr\/local\/lib\/python3[.\d]*\/dist-packages/);
    const imported = await sbx.commands.run(`cd / && python3 -c 'import ${wheel}; print(${wheel}.VALUE)'`);
    expect(imported.stdout).toBe(`${tag}\n`);
  });

  it("the host's own system is untouched", () => {
    expect(existsSync(`/usr/bin/${deb}`)).toBe(false);
    expect(existsSync(`/var/lib/dpkg/info/${deb}.list`)).toBe(false);
    for (const dir of ["/usr/local/lib", "/usr/lib"]) {
      for (const py of ["python3", "python3.11", "python3.12"]) expect(existsSync(`${dir}/${py}/dist-packages/${wheel}`)).toBe(false);
    }
  });
});
