// Installer steps of a template build reach the network (issue 12.1) through the real e2b JS SDK
// against the whole local system: aptInstall, pipInstall, npmInstall and gitClone fetch from a
// package mirror stand-in in
// a network namespace of this machine (package-mirror.ts), never a public host; the build step's
// network is governed like a sandbox's, so the host (the bridge's own address) stays out of reach;
// and a sandbox of the built template has the packages.
import { createServer, type Server } from "node:net";
import { Sandbox, Template, type LogEntry } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { removeBuiltLayers } from "../support/built-layers.ts";
import { startPackageMirror, type PackageMirror } from "../support/package-mirror.ts";
import { e2b, uniqueTag } from "./sdk.ts";

const store = new RootfsStore();
const outputs: string[] = [];
const startedAt = Date.now();
const tag = uniqueTag();
const deb = `hello-build-${tag}`;
const wheel = `build_pkg_${tag}`;
const npmPkg = `build-npm-${tag}`;
let repo: string;
let mirror: PackageMirror;
/** A listener of the host on every address: a build step must not reach it. */
let hostServer: Server;
let hostPort: number;

beforeAll(async () => {
  mirror = await startPackageMirror();
  mirror.addDeb({ name: deb, version: "2.1", script: `echo "hello from ${deb} as $(id -un)"` });
  mirror.addWheel({ name: wheel, version: "0.7", module: `VALUE = "${tag}"\n` });
  mirror.addNpm({ name: npmPkg, version: "3.0.1", main: `module.exports = "npm ${tag}";\n` });
  repo = mirror.addGitRepo({ name: `repo-${tag}`, files: { "README.md": `git ${tag}\n` } });
  hostServer = createServer((s) => s.end("host\n"));
  await new Promise<void>((ok) => hostServer.listen(0, "0.0.0.0", ok));
  hostPort = (hostServer.address() as { port: number }).port;
});

afterAll(async () => {
  mirror?.stop();
  hostServer?.close();
  await removeBuiltLayers(store, outputs, startedAt);
});

/** Python run in a step: tries the host at the step's default gateway (the bridge), prints which. */
const probeHost = (port: number) =>
  `python3 -c 'exec("import socket\\nr=[l.split() for l in open(\\"/proc/net/route\\")]\\ng=[x[2] for x in r if x[1]==\\"00000000\\"][0]\\nip=\\".\\".join(str(int(g[i:i+2],16)) for i in (6,4,2,0))\\ntry:\\n socket.create_connection((ip,${port}),3); print(\\"reached\\")\\nexcept OSError: print(\\"blocked\\")")' > /net-check.txt`;

describe("installer steps of a template build (JS SDK)", () => {
  const name = `tpl-net-${tag}`;

  it("aptInstall and pipInstall fetch from the mirror; a sandbox of the template has both packages", async () => {
    const logs: LogEntry[] = [];
    const template = Template()
      .fromBaseImage()
      // pip as root into Debian's python (PEP 668 mark): what E2B's image allows without a flag.
      .setEnvs({ PIP_INDEX_URL: mirror.pipIndex, PIP_TRUSTED_HOST: mirror.ip, PIP_BREAK_SYSTEM_PACKAGES: "1", PIP_NO_CACHE_DIR: "1" })
      // Only the mirror: the base's own sources (a public mirror) are moved out of apt's way.
      .runCmd(`mkdir -p /root/apt-sources && mv /etc/apt/sources.list /etc/apt/sources.list.d/* /root/apt-sources/ 2>/dev/null; echo "${mirror.aptSource}" > /etc/apt/sources.list.d/mirror.list`, { user: "root" })
      .aptInstall([deb])
      .pipInstall([wheel])
      .runCmd(probeHost(hostPort), { user: "root" });
    const built = await Template.build(template, name, { ...e2b(), onBuildLogs: (l: LogEntry) => logs.push(l) });
    outputs.push(`b-${built.buildId}`);
    const text = logs.map((l) => l.message).join("\n");
    expect(text).toContain(`Setting up ${deb} (2.1)`);
    expect(text).toContain(`Successfully installed ${wheel}-0.7`);

    const sbx = await Sandbox.create(name, e2b());
    try {
      const run = await sbx.commands.run(`${deb} && dpkg-query -W -f='\${Status} \${Version}\\n' ${deb} && cd / && python3 -c 'import ${wheel}; print(${wheel}.VALUE)' && cat /net-check.txt`);
      expect(run.stdout).toBe(`hello from ${deb} as user\ninstall ok installed 2.1\n${tag}\nblocked\n`);
    } finally {
      await sbx.kill();
    }
  }, 240_000);

  it("npmInstall and gitClone fetch from the stand-ins; a sandbox of the template has both", async () => {
    const logs: LogEntry[] = [];
    const template = Template()
      .fromBaseImage()
      .setEnvs({ NPM_CONFIG_REGISTRY: mirror.npmRegistry, NPM_CONFIG_AUDIT: "false", NPM_CONFIG_FUND: "false", NPM_CONFIG_UPDATE_NOTIFIER: "false" })
      .setWorkdir("/home/user/app")
      .npmInstall([npmPkg])
      .gitClone(repo, "/home/user/cloned");
    const built = await Template.build(template, `${name}-js`, { ...e2b(), onBuildLogs: (l: LogEntry) => logs.push(l) });
    outputs.push(`b-${built.buildId}`);
    const sbx = await Sandbox.create(`${name}-js`, e2b());
    try {
      const run = await sbx.commands.run(`cd /home/user/app && node -e 'console.log(require("${npmPkg}"))' && cat /home/user/cloned/README.md && stat -c %U /home/user/cloned/README.md`);
      expect(run.stdout).toBe(`npm ${tag}\ngit ${tag}\nuser\n`);
    } finally {
      await sbx.kill();
    }
  }, 240_000);
});
