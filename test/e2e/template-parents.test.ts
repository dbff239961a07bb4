// Templates related to other templates, through the real e2b JS SDK against the whole local system
// (issue 12.1). A template built `fromTemplate(parent)` starts from everything the parent's
// sandboxes have, as an image built FROM another does: its layers, its user, workdir and env, and
// its start and ready commands (unless the child sets its own). Two templates naming one build's
// root filesystem (as `code-interpreter-v1` names `code-interpreter`'s): deleting one leaves the
// other working; deleting the last frees it.
import { Sandbox, Template, waitForFile } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { removeBuiltLayers } from "../support/built-layers.ts";
import { e2b, uniqueTag } from "./sdk.ts";

const store = new RootfsStore();
const outputs: string[] = [];
const startedAt = Date.now();

afterAll(() => removeBuiltLayers(store, outputs, startedAt));

const headers = () => ({ "content-type": "application/json", "x-api-key": e2b().apiKey });

/** The admin API's path of the caller's own templates (its default team). */
async function teamTemplates(): Promise<string> {
  const res = await fetch(`${e2b().apiUrl}/teams`, { headers: headers() });
  const team = ((await res.json()) as { name: string; isDefault: boolean }[]).find((t) => t.isDefault)!;
  return `${e2b().apiUrl}/admin/teams/${team.name}/templates`;
}

async function build(t: Parameters<typeof Template.build>[0], name: string): Promise<string> {
  const built = await Template.build(t, name, e2b());
  outputs.push(`b-${built.buildId}`);
  return `b-${built.buildId}`;
}

describe("fromTemplate inherits what the parent's sandboxes have", { timeout: 600_000 }, () => {
  const run = uniqueTag();
  const parent = `tpl-parent-${run}`;

  it("a child's sandboxes and build steps run as the parent's user, in its workdir, with its env, and start the parent's start command; a child's own start command replaces it", async () => {
    await build(
      Template()
        .fromBaseImage()
        .setEnvs({ RUN_ID: run, PARENT_VAR: "from-the-parent" })
        .runCmd("useradd -m -s /bin/bash worker && mkdir -p /srv/app && chown worker /srv/app", { user: "root" })
        .setUser("worker")
        .setWorkdir("/srv/app")
        .setStartCmd('echo "$PARENT_VAR $(id -un) $(pwd)" > /tmp/parent-started; sleep infinity', waitForFile("/tmp/parent-started")),
      parent,
    );
    // No user, workdir, env or start command of its own.
    await build(Template().fromTemplate(parent).runCmd('echo "$PARENT_VAR $(id -un) $(pwd)" > step.txt'), `${parent}-child`);
    const sbx = await Sandbox.create(`${parent}-child`, e2b());
    try {
      const r = await sbx.commands.run('echo "$PARENT_VAR $(id -un) $(pwd)"; cat /srv/app/step.txt /tmp/parent-started');
      expect(r.stdout).toBe("from-the-parent worker /srv/app\n".repeat(3));
    } finally {
      await sbx.kill();
    }

    await build(
      Template().fromTemplate(parent).setEnvs({ CHILD_VAR: "own" }).setStartCmd('echo "$CHILD_VAR $PARENT_VAR" > /tmp/child-started; sleep infinity', waitForFile("/tmp/child-started")),
      `${parent}-own`,
    );
    const own = await Sandbox.create(`${parent}-own`, e2b());
    try {
      const r = await own.commands.run("cat /tmp/child-started; test -e /tmp/parent-started && echo parent-started-too; id -un; pwd");
      expect(r.stdout).toBe("own from-the-parent\nworker\n/srv/app\n");
    } finally {
      await own.kill();
    }
  });
});

describe("two templates naming one build's root filesystem", { timeout: 600_000 }, () => {
  it("deleting the built template leaves the other one creating sandboxes that run; deleting that one frees the build", async () => {
    const run = uniqueTag();
    const name = `tpl-shared-${run}`;
    const image = await build(Template().fromBaseImage().setEnvs({ RUN_ID: run }).runCmd(`echo ${run} > /shared.txt`, { user: "root" }), name);
    const admin = await teamTemplates();
    const got = (await (await fetch(`${admin}/${name}`, { headers: headers() })).json()) as { spec: Record<string, unknown> };
    const put = await fetch(`${admin}/${name}-alias`, { method: "PUT", headers: headers(), body: JSON.stringify({ spec: got.spec }) });
    expect(put.ok).toBe(true);

    const del = await fetch(`${e2b().apiUrl}/templates/${name}`, { method: "DELETE", headers: headers() });
    expect(del.status).toBe(204);
    const sbx = await Sandbox.create(`${name}-alias`, e2b());
    try {
      expect((await sbx.commands.run("cat /shared.txt")).stdout).toBe(`${run}\n`);
    } finally {
      await sbx.kill();
    }
    expect(store.template(image)).toBeDefined();

    const last = await fetch(`${e2b().apiUrl}/templates/${name}-alias`, { method: "DELETE", headers: headers() });
    expect(last.status).toBe(204);
    await expect.poll(() => store.template(image), { timeout: 10_000, interval: 100 }).toBeUndefined();
  });
});
