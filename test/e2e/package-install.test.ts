// Installing software into a sandbox's own system (issue 11.6), through the real e2b SDK against
// the whole local system: `sudo apt-get install -y` of a .deb and `pip install` of a wheel, both
// from a package mirror stand-in in a network namespace of this machine (package-mirror.ts),
// never a public host. The package's executable runs, `pip show` sees the wheel, and the host's
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

beforeAll(async () => {
  mirror = await startPackageMirror();
  mirror.addDeb({ name: deb, version: "1.2", script: `echo "hello from ${deb} as $(id -un)"` });
  mirror.addWheel({ name: wheel, version: "0.3", module: `VALUE = "${tag}"\n` });
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

  it("pip install into the system from the mirror's simple index: pip show sees it, python imports it", async () => {
    // Debian's python marks its system site as externally managed (PEP 668); E2B's base image
    // (python from a Docker python image) has no such mark, so a user's `sudo pip install` there
    // just works. --break-system-packages says the same to Debian's pip.
    const install = await sbx.commands.run(
      `sudo pip install --break-system-packages --no-cache-dir --index-url ${mirror.pipIndex} --trusted-host ${mirror.ip} ${wheel}`,
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
