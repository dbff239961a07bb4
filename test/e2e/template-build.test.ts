// Template builds through the real e2b JS SDK (`Template.build`) against the whole local system
// (issue 12.1): every local step kind runs in a build sandbox and lands as RootfsStore layers, a
// second build is served from the cache, a failing step fails the build with its output, an image
// this server cannot pull is a build error saying so. The template's spec.image names the built
// rootfs, and a sandbox of it sees those files. setStartCmd/setReadyCmd: the sandbox runs the
// start command and is handed out once the ready command passes, or the create fails saying so.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BuildError, Sandbox, SandboxError, Template, waitForFile, waitForPort, waitForTimeout, type LogEntry } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { removeBuiltLayers } from "../support/built-layers.ts";
import { HOST_LOADER_SAW_IT, hostileEnv, parseEnv0 } from "../support/hostile-env.ts";
import { e2b, uniqueTag } from "./sdk.ts";

const store = new RootfsStore();
const context = mkdtempSync(join(tmpdir(), "tpl-ctx-"));
writeFileSync(join(context, "hello.txt"), "hello from the upload\n");
mkdirSync(join(context, "sub"));
writeFileSync(join(context, "sub", "a.txt"), "a\n");
const outputs: string[] = [];
const startedAt = Date.now();

afterAll(async () => {
  rmSync(context, { recursive: true, force: true });
  // This run's layers (its team's keys are new each run) and templates leave the shared cache.
  await removeBuiltLayers(store, outputs, startedAt);
});

function opts(logs: LogEntry[]) {
  return { ...e2b(), onBuildLogs: (l: LogEntry) => logs.push(l) };
}

/** A file of the built rootfs, read from its top-most layer that has it. */
function builtFile(image: string, path: string): string | undefined {
  const trees = store.templateTrees(image) ?? [];
  for (const t of [...trees].reverse()) if (existsSync(join(t, path))) return readFileSync(join(t, path), "utf8");
  return undefined;
}

async function imageOf(name: string): Promise<string> {
  const res = await fetch(`${e2b().apiUrl}/teams`, { headers: { "x-api-key": e2b().apiKey } });
  const team = ((await res.json()) as { name: string; isDefault: boolean }[]).find((t) => t.isDefault)!;
  const r = await fetch(`${e2b().apiUrl}/admin/teams/${team.name}/templates/${name}`, { headers: { "x-api-key": e2b().apiKey } });
  if (!r.ok) throw new Error(`template ${name}: ${r.status} ${await r.text()}`);
  return ((await r.json()) as { spec: { image: string } }).spec.image;
}

const messages = (logs: LogEntry[]) => logs.map((l) => l.message);

describe("Template.build (JS SDK)", () => {
  const run = uniqueTag();
  const name = `tpl-${run}`;
  const template = () =>
    Template({ fileContextPath: context })
      .fromBaseImage()
      // The cache outlives a run (the seeded team keeps its id): this run's steps are its own.
      .setEnvs({ GREETING: "hi there", RUN_ID: run })
      .copy("hello.txt", "/home/user/hello.txt")
      .copy("sub", "/opt/sub/")
      .runCmd('echo "$GREETING" > /home/user/greet.txt')
      .setWorkdir("/app")
      .runCmd("pwd > where.txt && id -un >> where.txt")
      .runCmd("id -un > /root-made.txt", { user: "root" })
      .setUser("root")
      .runCmd("id -un > /app/last.txt")
      .setStartCmd("sleep infinity", waitForTimeout(1000));

  it("runs every local step kind in a build sandbox and publishes the result as layers", async () => {
    const logs: LogEntry[] = [];
    const built = await Template.build(template(), name, opts(logs));
    const image = await imageOf(name);
    outputs.push(image);
    expect(image).toBe(`b-${built.buildId}`);
    expect(builtFile(image, "home/user/hello.txt")).toBe("hello from the upload\n");
    expect(builtFile(image, "opt/sub/a.txt")).toBe("a\n");
    expect(builtFile(image, "home/user/greet.txt")).toBe("hi there\n");
    expect(builtFile(image, "app/where.txt")).toBe("/app\nuser\n");
    expect(builtFile(image, "root-made.txt")).toBe("root\n");
    expect(builtFile(image, "app/last.txt")).toBe("root\n");
    // The layers below are untouched: the base's tree has none of it.
    expect(existsSync(join(store.layerTree(store.template("base")!.layers[0]!), "app"))).toBe(false);
    expect(messages(logs).some((m) => m.includes("RUN pwd > where.txt"))).toBe(true);
    expect(messages(logs).some((m) => m.startsWith("CACHED"))).toBe(false);
    expect(await Template.aliasExists(name, e2b())).toBe(true);
    expect(await Template.aliasExists(`${name}-nope`, e2b())).toBe(false);
  });

  it("a second build of the same steps is served from the cache", async () => {
    const logs: LogEntry[] = [];
    const built = await Template.build(template(), name, opts(logs));
    outputs.push(`b-${built.buildId}`);
    const cached = messages(logs).filter((m) => m.startsWith("CACHED"));
    // Every step that makes a layer: 2 copies, 4 runs, the workdir.
    expect(cached).toHaveLength(7);
    expect(builtFile(`b-${built.buildId}`, "app/where.txt")).toBe("/app\nuser\n");
  });

  it("Sandbox.create(alias) runs on the built root filesystem, with the template's env and workdir", async () => {
    const sbx = await Sandbox.create(name, e2b());
    try {
      const r = await sbx.commands.run("cat /home/user/hello.txt /home/user/greet.txt /app/where.txt; echo $GREETING; pwd", { user: "root" });
      expect(r.stdout).toBe("hello from the upload\nhi there\n/app\nuser\nhi there\n/app\n");
    } finally {
      await sbx.kill();
    }
  });

  it("a build from the built template stacks on its layers", async () => {
    const logs: LogEntry[] = [];
    const built = await Template.build(Template().fromTemplate(name).setEnvs({ RUN_ID: run }).runCmd("cat /home/user/greet.txt"), `${name}-child`, opts(logs));
    outputs.push(`b-${built.buildId}`);
    expect(messages(logs)).toContain("hi there");
  });

  it("a step's root is root of a user namespace of its own; a sandbox of the template sees what it wrote as root's, _apt's and set-uid, and what it deleted stays deleted", async () => {
    const logs: LogEntry[] = [];
    const step = [
      "cat /proc/self/uid_map > /uid-map",
      "if mknod /null-x c 1 3 2>/dev/null; then echo made; else echo refused; fi > /mknod",
      "rm -f /null-x",
      "touch /root-owned && mkdir /opt/apt-owned && chown _apt /opt/apt-owned && rm /etc/motd",
      // sudo copied up into the step's layer, as a reinstall does.
      "chmod u-s /usr/bin/sudo && chmod u+s /usr/bin/sudo",
    ].join("; ");
    const built = await Template.build(Template().fromBaseImage().setEnvs({ RUN_ID: run }).runCmd(step, { user: "root" }), `${name}-ids`, opts(logs));
    outputs.push(`b-${built.buildId}`);
    const sbx = await Sandbox.create(`${name}-ids`, e2b());
    try {
      const r = await sbx.commands.run("stat -c '%U %a %n' /root-owned /opt/apt-owned /usr/bin/sudo; test -e /etc/motd && echo motd || echo no motd; sudo -n id -un; cat /mknod; awk '{print $1, ($2 >= 1048576), $3}' /uid-map");
      // The step's map: its 0 is a host uid of the ranges (2^20 and up), 65536 ids; not host root's 0 0 4294967295.
      expect(r.stdout).toBe("root 644 /root-owned\n_apt 755 /opt/apt-owned\nroot 4755 /usr/bin/sudo\nno motd\nroot\nrefused\n0 1 65536\n");
    } finally {
      await sbx.kill();
    }
  });

  it("a failing step fails the build with its output in the logs", async () => {
    const logs: LogEntry[] = [];
    const failing = Template().fromBaseImage().setEnvs({ RUN_ID: run }).runCmd("echo about-to-fail; echo on-stderr >&2; exit 3");
    const err = await Template.build(failing, `${name}-fail`, opts(logs)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BuildError);
    expect((err as Error).message).toContain("exit code 3");
    expect(messages(logs)).toContain("about-to-fail");
    expect(messages(logs)).toContain("on-stderr");
    expect(await Template.aliasExists(`${name}-fail`, e2b())).toBe(true); // the build is there, errored
  });

  it("a step is held to the build's memory: past it the step is killed and the build says so", async () => {
    const logs: LogEntry[] = [];
    const hungry = Template()
      .fromBaseImage()
      .setEnvs({ RUN_ID: run })
      .runCmd(`python3 -c 'b = bytearray(b"x") * (64 * 1024 * 1024); print("64 MiB fits")'`)
      .runCmd(`python3 -c 'b = bytearray(b"x") * (400 * 1024 * 1024); print("400 MiB fits")'`);
    const err = await Template.build(hungry, `${name}-mem`, { ...opts(logs), memoryMB: 256 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BuildError);
    expect((err as Error).message).toContain("exit code 137 (killed; the build has 256 MiB of memory)");
    expect(messages(logs)).toContain("64 MiB fits");
    expect(messages(logs)).not.toContain("400 MiB fits");
  });

  it("an image this server cannot pull is a build error that says so", async () => {
    const err = await Template.build(Template().fromImage("python:3").runCmd("true"), `${name}-py`, e2b()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BuildError);
    expect((err as Error).message).toMatch(/image "python:3" cannot be pulled/);
  });
});

/** The sandbox's log messages through E2B's logs API (`GET /v2/sandboxes/{id}/logs`). */
async function sandboxLogs(id: string): Promise<{ level: string; message: string; fields: Record<string, string> }[]> {
  const r = await fetch(`${e2b().apiUrl}/v2/sandboxes/${id}/logs?limit=1000`, { headers: { "x-api-key": e2b().apiKey } });
  if (!r.ok) throw new Error(`logs of ${id}: ${r.status} ${await r.text()}`);
  return ((await r.json()) as { logs: { level: string; message: string; fields: Record<string, string> }[] }).logs;
}

describe("setStartCmd / setReadyCmd (JS SDK)", () => {
  const run = uniqueTag();
  const name = `tpl-start-${run}`;

  it("every sandbox of the template runs the start command as its user, in its workdir, with its env, and is handed out once the ready command passes", async () => {
    const server = Template()
      .fromBaseImage()
      .setEnvs({ GREETING: "hello from the env", RUN_ID: run })
      .setWorkdir("/srv")
      .runCmd("echo served-file > /srv/index.txt", { user: "root" })
      .setUser("user")
      // Slow on purpose: the port opens a while after the process starts.
      .setStartCmd('echo "starting as $(id -un) in $(pwd): $GREETING"; echo to-stderr >&2; sleep 2; exec python3 -u -m http.server 8000', waitForPort(8000));
    const built = await Template.build(server, name, e2b());
    outputs.push(`b-${built.buildId}`);
    const sbx = await Sandbox.create(name, e2b());
    try {
      // Handed out only once the server listens: the first request needs no retry.
      const r = await sbx.commands.run("curl -sf http://127.0.0.1:8000/index.txt");
      expect(r.stdout).toBe("served-file\n");
      const logs = await sandboxLogs(sbx.sandboxId);
      const start = logs.filter((l) => l.fields.source === "start");
      expect(start.map((l) => l.message)).toContain("starting as user in /srv: hello from the env");
      expect(start.find((l) => l.message === "to-stderr")?.fields.stream).toBe("stderr");
      expect(start.map((l) => l.message)).toContain("Serving HTTP on 0.0.0.0 port 8000 (http://0.0.0.0:8000/) ...");
    } finally {
      await sbx.kill();
    }
  });

  it("a start command that never gets ready fails the create with a clear error after the ready timeout", async () => {
    const never = Template().fromBaseImage().setEnvs({ RUN_ID: run }).setStartCmd("echo never-ready; sleep infinity", "test -f /tmp/does-not-exist");
    const built = await Template.build(never, `${name}-never`, e2b());
    outputs.push(`b-${built.buildId}`);
    const err = await Sandbox.create(`${name}-never`, e2b()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as Error).message).toContain("the template's ready command did not pass within");
  });
});

describe("a build's environment never reaches a host helper", () => {
  it("setEnvs with loader, shell, perl and node start-up hooks reaches every step and the start command unchanged; no host process runs them", async () => {
    const hostile = hostileEnv();
    const run = uniqueTag();
    const name = `tpl-env-${run}`;
    try {
      const logs: LogEntry[] = [];
      const t = Template({ fileContextPath: context })
        .fromBaseImage()
        .setEnvs({ ...hostile.env, RUN_ID: run })
        .runCmd("env -0 > /home/user/env-user")
        .runCmd("env -0 > /env-root", { user: "root" })
        .copy("hello.txt", "/home/user/h.txt")
        .setWorkdir("/w")
        .setStartCmd("env -0 > /tmp/env-start; sleep infinity", waitForFile("/tmp/env-start"));
      const built = await Template.build(t, name, opts(logs));
      const image = `b-${built.buildId}`;
      outputs.push(image);
      expect(hostile.ran()).toEqual([]);
      expect(messages(logs).join("\n")).not.toContain(HOST_LOADER_SAW_IT);
      expect(parseEnv0(builtFile(image, "home/user/env-user") ?? "")).toMatchObject(hostile.env);
      expect(parseEnv0(builtFile(image, "env-root") ?? "")).toMatchObject(hostile.env);
      const sbx = await Sandbox.create(name, e2b());
      try {
        expect(parseEnv0(await sbx.files.read("/tmp/env-start"))).toMatchObject(hostile.env);
      } finally {
        await sbx.kill();
      }
      expect(hostile.ran()).toEqual([]);
    } finally {
      hostile.dispose();
    }
  });
});

/** A template of one own step (writes /mine.txt) and the layers the build made for it. */
async function builtOwn(prefix: string) {
  const run = uniqueTag();
  const name = `${prefix}-${run}`;
  const built = await Template.build(Template().fromBaseImage().setEnvs({ RUN_ID: run }).runCmd(`echo ${run} > /mine.txt`, { user: "root" }), name, e2b());
  const image = `b-${built.buildId}`;
  outputs.push(image);
  const own = store.template(image)!.layers.filter((l) => store.layer(l)?.kind === "build");
  expect(own.length).toBeGreaterThan(0);
  return { run, name, image, own };
}

async function deleteTemplate(name: string): Promise<void> {
  const res = await fetch(`${e2b().apiUrl}/templates/${name}`, { method: "DELETE", headers: { "x-api-key": e2b().apiKey } });
  expect(res.status).toBe(204);
}

describe("built layers are freed: DELETE /templates/{id}, a rebuild", () => {
  it("the template's record and its own layers stay while a sandbox of it lives and go after it", async () => {
    const { run, name, image, own } = await builtOwn("tpl-del");
    const sbx = await Sandbox.create(name, e2b());
    try {
      await deleteTemplate(name);
      // Named by a sandbox of the cluster: kept, and the sandbox still reads its files.
      expect((await sbx.commands.run("cat /mine.txt")).stdout).toBe(`${run}\n`);
      expect(store.template(image)).toBeDefined();
      expect(own.every((l) => store.layer(l))).toBe(true);
    } finally {
      await sbx.kill();
    }
    await expect.poll(() => store.template(image), { timeout: 30_000, interval: 200 }).toBeUndefined();
    await expect.poll(() => own.filter((l) => store.layer(l)), { timeout: 30_000, interval: 200 }).toEqual([]);
  });

  it("a rebuild: the previous build's record and the layers only it named stay while a sandbox of the old build lives and go after it", { timeout: 120_000 }, async () => {
    const run = uniqueTag();
    const name = `tpl-reb-${run}`;
    const shared = (t: ReturnType<typeof Template>) => t.fromBaseImage().setEnvs({ RUN_ID: run }).runCmd(`echo ${run} > /shared.txt`, { user: "root" });
    const first = await Template.build(shared(Template()).runCmd(`echo one > /v.txt`, { user: "root" }), name, e2b());
    const old = `b-${first.buildId}`;
    outputs.push(old);
    const oldLayers = store.template(old)!.layers;
    const sbx = await Sandbox.create(name, e2b());
    try {
      const second = await Template.build(shared(Template()).runCmd(`echo two > /v.txt`, { user: "root" }), name, e2b());
      const cur = `b-${second.buildId}`;
      outputs.push(cur);
      const own = oldLayers.filter((l) => !store.template(cur)!.layers.includes(l));
      expect(own.length).toBe(1);
      // The old build's sandbox still names it: its record and last layer are kept, and it reads its files.
      expect((await sbx.commands.run("cat /shared.txt /v.txt")).stdout).toBe(`${run}\none\n`);
      expect(store.template(old)).toBeDefined();
      expect(store.layer(own[0]!)).toBeDefined();
      const fresh = await Sandbox.create(name, e2b());
      try {
        expect((await fresh.commands.run("cat /v.txt")).stdout).toBe("two\n");
      } finally {
        await fresh.kill();
      }
    } finally {
      await sbx.kill();
    }
    await expect.poll(() => store.template(old), { timeout: 30_000, interval: 200 }).toBeUndefined();
    await expect.poll(() => oldLayers.filter((l) => !store.layer(l)), { timeout: 30_000, interval: 200 }).toEqual(oldLayers.slice(-1));
  });

  // A Stop-paused sandbox runs nothing and mounts nothing, yet needs its template's layers to
  // come back: the edge keeps the template's record while the sandbox names it, and the agent
  // its layers (its kept record names them) until the sandbox goes.
  it("a Stop-paused sandbox of the deleted template resumes on its layers, with its own files", { timeout: 120_000 }, async () => {
    const { run, name, image, own } = await builtOwn("tpl-delp");
    const sbx = await Sandbox.create(name, e2b());
    try {
      await sbx.files.write("/home/user/note.txt", "written before the pause\n");
      expect(await sbx.pause({ keepMemory: false })).toBe(true);
      await deleteTemplate(name);
      expect(own.every((l) => store.layer(l))).toBe(true);
      const back = await Sandbox.connect(sbx.sandboxId, e2b());
      expect((await back.commands.run("cat /mine.txt /home/user/note.txt")).stdout).toBe(`${run}\nwritten before the pause\n`);
    } finally {
      await sbx.kill();
    }
    await expect.poll(() => store.template(image), { timeout: 30_000, interval: 200 }).toBeUndefined();
    await expect.poll(() => own.filter((l) => store.layer(l)), { timeout: 30_000, interval: 200 }).toEqual([]);
  });
});
