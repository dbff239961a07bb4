// E2B's template build routes against the Worker in workerd, with real sqld and a scripted agent
// that says it has a builder: auth, per-team visibility (another team's build is E2B's 404),
// validation of every step kind, signed upload links, the build frame the agent gets, its log
// lines and result coming back through status, and 501 for a cluster without a builder.
import { describe, expect, it, vi } from "vitest";
import { env, exports } from "cloudflare:workers";
import { MAX_TEAM_UPLOADS_IN_FLIGHT, MAX_TEAM_UPLOADS_WAITING } from "../../../durable-objects/operations/template-files.ts";
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import type { ClusterDO } from "../../../durable-objects/cluster/cluster-do.ts";
import { eq } from "drizzle-orm";
import { getDb } from "../../../durable-objects/store/db.ts";
import { BUILD_SILENCE_MS, LOGGED_BUILDS_PER_TEAM, MAX_TEAM_BUILDS, MAX_TEAM_WAITING_BUILDS, MAX_TEMPLATE_FILE_BYTES, TEMPLATE_FILE_TTL_MS, WAITING_BUILD_TTL_MS } from "../../../schema/api/template-build.ts";
import { templateBuilds } from "../../../schema/db/tables.ts";
import { MAX_ENV_NAME_LENGTH, MAX_ENV_VALUE_LENGTH, MAX_ENV_VARS, MAX_PATH_LENGTH, MAX_TEMPLATE_CONFIG_BYTES } from "../../../schema/api/limits.ts";
import { TemplateSpec } from "../../../schema/api/template.ts";
import { CLAIM_SUPERSEDED_SQL, claimUnusedImages, putFile, UNSENT_FREES_SQL, useFiles } from "../../../durable-objects/store/template-builds.ts";
import { IMAGE_FREE_GRACE_MS } from "../../../durable-objects/operations/image-gc.ts";
import { getTemplate, namesFreedImage, upsertTemplate } from "../../../durable-objects/store/templates.ts";
import { clusterTokenFor } from "../../../schema/protocol/cluster-token.ts";
import { call, createTeam, expectError, expectStatus, startAgent, unique } from "../helpers.ts";
import type { ScriptedAgent } from "../../support/scripted-agent.ts";

const HASH = "a".repeat(64);

async function requestBuild(key: string, name: string, request: Record<string, unknown> = {}) {
  return expectStatus(call("/v3/templates", { key, body: { name, cpuCount: 1, memoryMB: 512, ...request } }), 202);
}

/** A build of `name` on the team's cluster (the scripted agent's; a `rebuild` of a template there
 * already) with `body` as its start, which the agent reports ready with the config it was handed;
 * answers the frame and the built spec. `request`: more of the build request (`tags`). */
async function buildReady(team: { name: string; key: string; cluster: string }, agent: ScriptedAgent, name: string, body: Record<string, unknown>, rebuild = false, request: Record<string, unknown> = {}) {
  if (!rebuild) await expectStatus(call(`/admin/teams/${team.name}/templates/${name}`, { method: "PUT", body: { spec: { cluster: team.cluster } } }), 201);
  const { buildID } = await requestBuild(team.key, name, request);
  await expectStatus(call(`/v2/templates/${name}/builds/${buildID}`, { key: team.key, body: { steps: [{ type: "RUN", args: ["true"] }], ...body } }), 202);
  await agent.waitUntil(() => agent.builds.some((b) => b.buildId === buildID));
  const frame = agent.builds.find((b) => b.buildId === buildID)!;
  agent.sendFrame({ type: "buildEvents", items: [{ buildId: buildID, logs: [], result: { status: "ready", ...(frame.config ?? { user: "user", workdir: "/home/user", env: {} }) } }] });
  await poll(async () => (await expectStatus(call(`/templates/${name}/builds/${buildID}/status`, { key: team.key }), 200)).status === "ready");
  return { frame, spec: (await expectStatus(call(`/admin/teams/${team.name}/templates/${name}`), 200)).spec as Record<string, unknown> & { image: string } };
}

/** A pass of the cluster's built-image collection as it runs `ahead` ms from now (by default past
 * the grace period a freed image is kept for creates under way); answers what went to the agent. */
async function collect(cluster: string, ahead = IMAGE_FREE_GRACE_MS + 1): Promise<string[]> {
  return (await env.CLUSTER.get(env.CLUSTER.idFromName(cluster)).collectImages(cluster, Date.now() + ahead)).sent;
}

/** Whether `image` is claimed for freeing (a pass may send it once its grace is over). */
async function claimed(image: string): Promise<boolean> {
  return (await getDb(env).$client.execute({ sql: "SELECT 1 FROM freed_images WHERE image = ?", args: [image] })).rows.length > 0;
}

describe("template build API", () => {
  it("needs a key and refuses malformed requests with 400 naming the problem", async () => {
    const team = await createTeam(unique("tb-val"));
    await expectError(call("/v3/templates", { key: null, body: { name: "x" } }), 401);
    await expectError(call("/v3/templates", { key: team.key, body: { name: "Bad Name" } }), 400, /template name/);
    await expectError(call("/v3/templates", { key: team.key, body: {} }), 400, /name is required/);
    await expectError(call("/v3/templates", { key: team.key, body: { name: "base" } }), 409, /public template/);
    const { buildID } = await requestBuild(team.key, team.template);
    const start = (body: unknown) => call(`/v2/templates/${team.template}/builds/${buildID}`, { key: team.key, body });
    await expectError(start({ steps: [{ type: "RUN", args: ["true", "Not A User"] }] }), 400, /RUN's user/);
    await expectError(start({ steps: [{ type: "ENV", args: ["1BAD", "x"] }] }), 400, /ENV 1BAD: env var names are/);
    // Raw JSON: `__proto__` as a name would be a no-op assignment, the variable gone behind a 2xx.
    await expectError(start({ steps: [{ type: "ENV", args: ["__proto__", "x"] }] }), 400, /__proto__ is not allowed/);
    await expectError(start({ steps: [{ type: "COPY", args: ["a", "/a"] }] }), 400, /filesHash/);
    await expectError(start({ steps: [{ type: "COPY", args: ["../etc", "/a"], filesHash: HASH }] }), 400, /inside the build context/);
    await expectError(start({ steps: [{ type: "WORKDIR", args: ["relative"] }] }), 400, /absolute path/);
    await expectError(start({ steps: [{ type: "EXPOSE", args: ["80"] }] }), 400);
    await expectError(start({ steps: Array.from({ length: 65 }, () => ({ type: "RUN", args: ["true"] })) }), 400, /at most 64 steps/);
    await expectError(start({ steps: [{ type: "RUN", args: ["x".repeat(70_000)] }] }), 400);
    // The template's config is bounded as a sandbox's env and paths are (the agent reports it back).
    await expectError(start({ steps: [{ type: "ENV", args: ["A", "x".repeat(MAX_ENV_VALUE_LENGTH + 1)] }] }), 400, new RegExp(`ENV A: .*<=${MAX_ENV_VALUE_LENGTH} characters`));
    await expectError(start({ steps: [{ type: "ENV", args: ["A".repeat(MAX_ENV_NAME_LENGTH + 1), "x"] }] }), 400, new RegExp(`<=${MAX_ENV_NAME_LENGTH} characters`));
    await expectError(start({ steps: [{ type: "WORKDIR", args: ["/" + "d/".repeat(MAX_PATH_LENGTH / 2)] }] }), 400, /WORKDIR's path is at most/);
    const vars = (from: number) => ({ type: "ENV", args: Array.from({ length: MAX_ENV_VARS / 2 + 1 }, (_, i) => [`V${from + i}`, "x"]).flat() });
    await expectError(start({ steps: [vars(0), vars(MAX_ENV_VARS)] }), 400, new RegExp(`at most ${MAX_ENV_VARS} env vars`));
    await expectError(start({ steps: [{ type: "COPY", args: ["a", "/a"], filesHash: HASH }] }), 400, /were not uploaded/);
    await expectError(start({ fromImageRegistry: { type: "registry", username: "u", password: "p" } }), 400, /registries/);
    await expectError(start({ fromTemplate: "nope-nope" }), 400, /not found/);
    // A base's env plus the steps' past a template's bounds (a chain of ENV-only builds adds up):
    // past the count, or past MAX_TEMPLATE_CONFIG_BYTES as JSON (control characters: 6 bytes each).
    const db = getDb(env);
    const teamId = String((await db.$client.execute({ sql: "SELECT id FROM teams WHERE name = ?", args: [team.name] })).rows[0]!.id);
    const base = (name: string, vars: number, value: string) =>
      upsertTemplate(db, { teamId, templateId: `${team.template}-${name}`, public: false, spec: TemplateSpec.parse({ image: "base", env: Object.fromEntries(Array.from({ length: vars }, (_, i) => [`B${i}`, value])) }) });
    await base("many", MAX_ENV_VARS - 1, "x");
    await expectError(start({ fromTemplate: `${team.template}-many`, steps: [{ type: "ENV", args: ["C1", "1", "C2", "2"] }] }), 400, new RegExp(`at most ${MAX_ENV_VARS} env vars`));
    await base("big", Math.ceil(MAX_TEMPLATE_CONFIG_BYTES / (6 * MAX_ENV_VALUE_LENGTH)) - 1, "\u0001".repeat(MAX_ENV_VALUE_LENGTH));
    await expectError(start({ fromTemplate: `${team.template}-big`, steps: [{ type: "ENV", args: ["C1", "\u0001".repeat(MAX_ENV_VALUE_LENGTH)] }] }), 400, new RegExp(`bytes as JSON, more than the ${MAX_TEMPLATE_CONFIG_BYTES}`));
  });

  it("runs a build on the cluster's builder: upload, start, logs as they come, ready; another team sees none of it", async () => {
    const team = await createTeam(unique("tb-flow"));
    const other = await createTeam(unique("tb-other"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const req = await requestBuild(team.key, team.template);
      expect(req).toMatchObject({ templateID: team.template, aliases: [team.template], names: [team.template] });
      const id = req.buildID as string;

      // Upload link: signed, served by the edge; a second ask says present.
      const link = await expectStatus(call(`/templates/${team.template}/files/${HASH}`, { key: team.key }), 201);
      expect(link.present).toBe(false);
      const url = new URL(link.url);
      const forged = new URL(url);
      forged.searchParams.set("signature", "0".repeat(64));
      await expectError(call(`${forged.pathname}${forged.search}`, { key: null, method: "PUT", raw: "x" }), 403, /signature/);
      await expectError(call(`${url.pathname}${url.search}`, { key: null, method: "PUT", raw: "x".repeat(MAX_TEMPLATE_FILE_BYTES + 1) }), 413);
      await expectStatus(call(`${url.pathname}${url.search}`, { key: null, method: "PUT", raw: "tar bytes" }), 201);
      expect(await expectStatus(call(`/templates/${team.template}/files/${HASH}`, { key: team.key }), 201)).toEqual({ present: true });
      await expectError(call(`/templates/${team.template}/files/${HASH}`, { key: other.key }), 404);

      // Another team can neither start, read nor delete it.
      await expectError(call(`/v2/templates/${team.template}/builds/${id}`, { key: other.key, body: {} }), 404);
      await expectError(call(`/templates/${team.template}/builds/${id}/status`, { key: other.key }), 404);
      await expectError(call(`/templates/${team.template}/builds/${id}/logs`, { key: other.key }), 404);

      const steps = [
        { type: "COPY", args: ["a.txt", "/home/user/a.txt"], filesHash: HASH },
        { type: "RUN", args: ["echo hi", "root"] },
      ];
      await expectStatus(call(`/v2/templates/${team.template}/builds/${id}`, { key: team.key, body: { fromTemplate: "base", steps, startCmd: "sleep 1", readyCmd: "true" } }), 202);
      await expectError(call(`/v2/templates/${team.template}/builds/${id}`, { key: team.key, body: {} }), 409, /already started/);
      await agent.waitUntil(() => agent.builds.length === 1);
      const frame = agent.builds[0]!;
      expect(frame).toMatchObject({ buildId: id, from: { rootfs: "base" }, output: `b-${id}`, force: false });
      expect(frame.steps.map((s) => s.type)).toEqual(["COPY", "RUN"]);

      // The agent fetches the archive with its own cluster's token only: not with the edge's root
      // token, nor with another cluster's.
      await expectError(call(`${frame.filesPath}${HASH}`, { key: null }), 401);
      await expectError(call(`${frame.filesPath}${HASH}`, { key: null, headers: { authorization: "Bearer test-cluster-token" } }), 401);
      await expectError(call(`${frame.filesPath}${HASH}`, { key: null, headers: { authorization: `Bearer ${await clusterTokenFor("test-cluster-token", `${team.cluster}-other`)}` } }), 401);
      const file = await call(`${frame.filesPath}${HASH}`, { key: null, headers: { authorization: `Bearer ${await clusterTokenFor("test-cluster-token", team.cluster)}` } });
      expect(await file.text()).toBe("tar bytes");

      const status = () => expectStatus(call(`/templates/${team.template}/builds/${id}/status?logsOffset=0`, { key: team.key }), 200);
      expect(await status()).toMatchObject({ status: "building", logEntries: [] });
      const log = (seq: number, message: string, step?: string) => ({ seq, at: Date.now(), level: "info" as const, message, ...(step ? { step } : {}) });
      agent.sendFrame({ type: "buildEvents", items: [{ buildId: id, logs: [log(0, "FROM base", "base"), log(1, "[2/2] RUN echo hi", "2")] }] });
      await poll(async () => (await status()).logEntries.length === 2);
      // A repeated entry is kept once; logsOffset skips what the SDK has.
      agent.sendFrame({ type: "buildEvents", items: [{ buildId: id, logs: [log(1, "[2/2] RUN echo hi", "2"), log(2, "hi", "2")], result: { status: "ready", user: "root", workdir: "/app", env: { A: "b" } } }] });
      await poll(async () => (await status()).status === "ready");
      const tail = await expectStatus(call(`/templates/${team.template}/builds/${id}/status?logsOffset=2`, { key: team.key }), 200);
      expect(tail.logEntries.map((e: { message: string }) => e.message)).toEqual(["hi"]);
      const logs = await expectStatus(call(`/templates/${team.template}/builds/${id}/logs`, { key: team.key }), 200);
      expect(logs.logs.map((e: { message: string }) => e.message)).toEqual(["FROM base", "[2/2] RUN echo hi", "hi"]);

      // GET /templates/{id} lists the build itself (its id, status and resources).
      const listed = await expectStatus(call(`/templates/${team.template}`, { key: team.key }), 200);
      expect(listed.builds).toMatchObject([{ buildID: id, status: "ready", cpuCount: 1, memoryMB: 512 }]);

      // The template now names the built rootfs, with the build's config.
      const t = await expectStatus(call(`/admin/teams/${team.name}/templates/${team.template}`), 200);
      expect(t.spec).toMatchObject({ image: `b-${id}`, user: "root", workdir: "/app", env: { A: "b" }, startCmd: "sleep 1", readyCmd: "true" });
      expect(await expectStatus(call(`/templates/aliases/${team.template}`, { key: team.key }), 200)).toEqual({ templateID: team.template, public: false });
      await expectError(call(`/templates/aliases/${team.template}`, { key: other.key }), 404);

      // Tags name builds.
      await expectStatus(call("/templates/tags", { key: team.key, body: { target: team.template, tags: ["v1"] } }), 201);
      const tags = await expectStatus(call(`/templates/${team.template}/tags`, { key: team.key }), 200);
      expect(tags).toMatchObject([{ tag: "v1", buildID: id }]);
      await expectError(call("/templates/tags", { key: other.key, body: { target: team.template, tags: ["v1"] } }), 404);
      await expectStatus(call("/templates/tags", { key: team.key, method: "DELETE", body: { name: team.template, tags: ["v1"] } }), 204);

      await expectError(call(`/templates/${team.template}`, { key: other.key, method: "DELETE" }), 404);
      expect(agent.rootfsDeletes).toEqual([]);
      await expectStatus(call(`/templates/${team.template}`, { key: team.key, method: "DELETE" }), 204);
      await expectError(call(`/templates/${team.template}/builds/${id}/status`, { key: team.key }), 404);
      // The agent is asked to free the build's root filesystem, once the grace period is over.
      expect(await collect(team.cluster, 0)).toEqual([]);
      expect(await collect(team.cluster)).toEqual([`b-${id}`]);
      await vi.waitFor(() => expect(agent.rootfsDeletes).toEqual([`b-${id}`]));
    } finally {
      agent.disconnect();
    }
  });

  it("a template built fromTemplate a code-interpreter template is one too (codeInterpreter: true); one built from base is not", async () => {
    const team = await createTeam(unique("tb-ci"), { spec: { codeInterpreter: true } });
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const built = async (name: string, fromTemplate: string) => (await buildReady(team, agent, name, { fromTemplate })).spec;
      expect(await built(`${team.template}-derived`, team.template)).toMatchObject({ codeInterpreter: true });
      expect((await built(`${team.template}-plain`, "base")).codeInterpreter).toBeUndefined();
    } finally {
      agent.disconnect();
    }
  });

  it("nestedUserNamespaces is the operator's: a tenant's build request cannot set it, a rebuild keeps it, a template built fromTemplate one that has it does not get it", async () => {
    const team = await createTeam(unique("tb-uns"), { spec: { nestedUserNamespaces: true } });
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      expect((await buildReady(team, agent, team.template, {}, true)).spec.nestedUserNamespaces).toBe(true);
      expect((await buildReady(team, agent, `${team.template}-derived`, { fromTemplate: team.template })).spec.nestedUserNamespaces).toBeUndefined();
      // E2B's build bodies are not strict (unknown fields are dropped): asking changes nothing.
      const asked = await buildReady(team, agent, `${team.template}-asked`, { nestedUserNamespaces: true }, false, { nestedUserNamespaces: true });
      expect(asked.spec.nestedUserNamespaces).toBeUndefined();
      // The admin API validates it: a non-boolean is a 400 naming the field.
      const bad = await call(`/admin/teams/${team.name}/templates/${team.template}-bad`, { method: "PUT", body: { spec: { cluster: team.cluster, nestedUserNamespaces: "yes" } } });
      expect(bad.status).toBe(400);
      expect(await bad.text()).toContain("nestedUserNamespaces");
    } finally {
      agent.disconnect();
    }
  });

  it("a build fromTemplate starts from the parent's user, workdir and env and takes its start and ready commands unless it sets its own", async () => {
    const parent = { user: "worker", workdir: "/srv/app", env: { PARENT_VAR: "p" }, startCmd: "parent-start", readyCmd: "parent-ready" };
    const team = await createTeam(unique("tb-inh"), { spec: parent });
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const built = (name: string, start: Record<string, string>) => buildReady(team, agent, name, { fromTemplate: team.template, ...start });
      const child = await built(`${team.template}-child`, {});
      expect(child.frame.config).toEqual({ user: "worker", workdir: "/srv/app", env: { PARENT_VAR: "p" } });
      expect(child.spec).toMatchObject(parent);
      const own = await built(`${team.template}-own`, { startCmd: "own-start" });
      expect(own.spec).toMatchObject({ user: "worker", startCmd: "own-start" });
      expect(own.spec.readyCmd).toBeUndefined();
      const ready = await built(`${team.template}-ready`, { readyCmd: "own-ready" });
      expect(ready.spec).toMatchObject({ startCmd: "parent-start", readyCmd: "own-ready" });
      // A rebuild takes its commands from this build, not from the template's previous one.
      const rebuilt = await buildReady(team, agent, `${team.template}-child`, { fromTemplate: team.template, startCmd: "rebuilt-start" }, true);
      expect(rebuilt.spec).toMatchObject({ startCmd: "rebuilt-start" });
      expect(rebuilt.spec.readyCmd).toBeUndefined();
    } finally {
      agent.disconnect();
    }
  });

  it("a built image two templates name is freed only when the last of them is deleted", async () => {
    const team = await createTeam(unique("tb-shared"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const built = async (name: string) => (await buildReady(team, agent, name, {})).spec;
      const name = `${team.template}-built`;
      const shared = await built(name);
      const other = await built(`${name}-other`);
      await expectStatus(call(`/admin/teams/${team.name}/templates/${name}-alias`, { method: "PUT", body: { spec: shared } }), 201);

      await expectStatus(call(`/templates/${name}`, { key: team.key, method: "DELETE" }), 204);
      // Frames reach the agent in order: once the later delete's is there, the first sent none.
      await expectStatus(call(`/templates/${name}-other`, { key: team.key, method: "DELETE" }), 204);
      expect(await collect(team.cluster)).toEqual([other.image]);
      await vi.waitFor(() => expect(agent.rootfsDeletes).toEqual([other.image]));
      // The last template naming it (no build of its own) frees it.
      await expectStatus(call(`/templates/${name}-alias`, { key: team.key, method: "DELETE" }), 204);
      expect(await collect(team.cluster)).toEqual([shared.image]);
      await vi.waitFor(() => expect(agent.rootfsDeletes).toEqual([other.image, shared.image]));
      // A PUT naming the freed image (as one racing the delete would, after its check) is refused:
      // no template is left naming an image the agent was told to free.
      await expectError(call(`/admin/teams/${team.name}/templates/${name}-late`, { method: "PUT", body: { spec: shared } }), 400, /was released \(no template or tag referenced it\) and is being freed/);
      await expectStatus(call(`/admin/teams/${team.name}/templates/${name}-late`), 404);
    } finally {
      agent.disconnect();
    }
  });

  it("a rebuild frees the image the template named before, unless a tag or another template still names it", async () => {
    const team = await createTeam(unique("tb-rebuild"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const name = `${team.template}-re`;
      const first = (await buildReady(team, agent, name, {})).spec;
      const second = (await buildReady(team, agent, name, {}, true)).spec;
      expect(second.image).not.toBe(first.image);
      // Kept for the grace period (a create may have taken it just before), then freed.
      expect(await collect(team.cluster, 0)).toEqual([]);
      expect(await collect(team.cluster)).toEqual([first.image]);
      await vi.waitFor(() => expect(agent.rootfsDeletes).toEqual([first.image]));
      // Its build's status is still there to ask for.
      await expectStatus(call(`/templates/${name}/builds/${first.image.slice(2)}/status`, { key: team.key }), 200);
      // A second template names the current image: the rebuild keeps it until that one moves.
      await expectStatus(call(`/admin/teams/${team.name}/templates/${name}-alias`, { method: "PUT", body: { spec: second } }), 201);
      const third = (await buildReady(team, agent, name, {}, true, { tags: ["keep"] })).spec;
      // A tagged build is kept when superseded.
      const fourth = (await buildReady(team, agent, name, {}, true)).spec;
      expect(await collect(team.cluster)).toEqual([]);
      await expectStatus(call(`/admin/teams/${team.name}/templates/${name}-alias`, { method: "PUT", body: { spec: fourth } }), 200);
      expect(await collect(team.cluster)).toEqual([second.image]);
      await vi.waitFor(() => expect(agent.rootfsDeletes).toEqual([first.image, second.image]));
      expect(agent.rootfsDeletes).not.toContain(third.image);
      // No template may name a freed image again.
      await expectError(call(`/admin/teams/${team.name}/templates/${name}-alias`, { method: "PUT", body: { spec: first } }), 400, /was released \(no template or tag referenced it\) and is being freed/);
    } finally {
      agent.disconnect();
    }
  });

  it("a create that took the template's spec just before a rebuild finished becomes Running: the old image is freed only once no sandbox names it", async () => {
    const team = await createTeam(unique("tb-gc-create"));
    const name = `${team.template}-gc`;
    let first = "";
    // The agent holds the create of the first build's image (an ensure still on its way).
    const agent = await startAgent(team.cluster, { builder: true, hold: (i) => first !== "" && i.desired.state === "running" && i.template?.image === first });
    try {
      first = (await buildReady(team, agent, name, {})).spec.image;
      const created = call("/sandboxes", { key: team.key, body: { templateID: name, timeout: 300 } });
      await agent.waitUntil(() => agent.held.size === 1);
      const second = (await buildReady(team, agent, name, {}, true)).spec.image;
      expect(second).not.toBe(first);
      agent.release([...agent.held.keys()][0]!);
      const sbx = await expectStatus(created, 201);
      // Not freed at the rebuild's finish, nor past the grace period while the sandbox names it.
      expect(agent.rootfsDeletes).toEqual([]);
      expect(await collect(team.cluster)).toEqual([]);
      await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key, method: "DELETE" }), 204);
      await vi.waitFor(async () => expect(await collect(team.cluster)).toEqual([first]));
      await vi.waitFor(() => expect(agent.rootfsDeletes).toEqual([first]));
    } finally {
      agent.disconnect();
    }
  });

  /** A parent template built once (`first`, its image), and a child's build from it running. */
  async function childBuildOnParent(team: Awaited<ReturnType<typeof createTeam>>, agent: Awaited<ReturnType<typeof startAgent>>) {
    const parent = `${team.template}-parent`;
    const child = `${team.template}-child`;
    const first = (await buildReady(team, agent, parent, {})).spec.image;
    await expectStatus(call(`/admin/teams/${team.name}/templates/${child}`, { method: "PUT", body: { spec: { cluster: team.cluster } } }), 201);
    const { buildID } = await requestBuild(team.key, child);
    await expectStatus(call(`/v2/templates/${child}/builds/${buildID}`, { key: team.key, body: { fromTemplate: parent, steps: [{ type: "RUN", args: ["true"] }] } }), 202);
    await agent.waitUntil(() => agent.builds.some((b) => b.buildId === buildID));
    return { parent, child, first, buildID };
  }

  it("a fromTemplate build keeps its base: the parent's rebuild frees the parent's old image only after the child's build is done", async () => {
    const team = await createTeam(unique("tb-gc-child"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const { parent, child, first, buildID } = await childBuildOnParent(team, agent);
      expect(agent.builds.find((b) => b.buildId === buildID)!.from).toEqual({ rootfs: first });
      await buildReady(team, agent, parent, {}, true);
      expect(agent.rootfsDeletes).toEqual([]);
      expect(await collect(team.cluster)).toEqual([]);
      agent.sendFrame({ type: "buildEvents", items: [{ buildId: buildID, logs: [], result: { status: "ready", user: "user", workdir: "/home/user", env: {} } }] });
      await poll(async () => (await expectStatus(call(`/templates/${child}/builds/${buildID}/status`, { key: team.key }), 200)).status === "ready");
      expect(await collect(team.cluster)).toEqual([first]);
      await vi.waitFor(() => expect(agent.rootfsDeletes).toEqual([first]));
    } finally {
      agent.disconnect();
    }
  });

  it("a fromTemplate build that fails releases its base: the parent's old image is claimed without another template write", async () => {
    const team = await createTeam(unique("tb-gc-childfail"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const { parent, child, first, buildID } = await childBuildOnParent(team, agent);
      await buildReady(team, agent, parent, {}, true);
      // The parent's rebuild ran a pass while the child stood on its old image: not claimed.
      expect(await claimed(first)).toBe(false);
      agent.sendFrame({ type: "buildEvents", items: [{ buildId: buildID, logs: [], result: { status: "error", message: "step failed" } }] });
      await poll(async () => (await expectStatus(call(`/templates/${child}/builds/${buildID}/status`, { key: team.key }), 200)).status === "error");
      await vi.waitFor(async () => expect(await claimed(first)).toBe(true));
    } finally {
      agent.disconnect();
    }
  });

  it("a re-point while the agent is offline is applied, and the agent is told to free the old image when it connects", async () => {
    const team = await createTeam(unique("tb-gc-offline"));
    const name = `${team.template}-off`;
    const agent = await startAgent(team.cluster, { builder: true });
    const first = (await buildReady(team, agent, name, {})).spec;
    agent.disconnect();
    await poll(async () => !(await env.CLUSTER.get(env.CLUSTER.idFromName(team.cluster)).status()).connected);
    const put = await expectStatus(call(`/admin/teams/${team.name}/templates/${name}`, { method: "PUT", body: { spec: { ...first, image: "base" } } }), 200);
    expect(put.spec.image).toBe("base");
    const again = await startAgent(team.cluster, { builder: true });
    try {
      expect(await collect(team.cluster)).toEqual([first.image]);
      await vi.waitFor(() => expect(again.rootfsDeletes).toEqual([first.image]));
      // Told once: a later pass of the session sends it no more.
      expect(await collect(team.cluster)).toEqual([]);
    } finally {
      again.disconnect();
    }
    // The frame has no ack: a new session (the last one may have dropped as it was written) is
    // told again with its welcome.
    const third = await startAgent(team.cluster, { builder: true });
    try {
      await vi.waitFor(() => expect(third.rootfsDeletes).toEqual([first.image]));
    } finally {
      third.disconnect();
    }
  });

  it("the delete's check and claim are one statement: a template write either comes first and keeps the image, or is refused", async () => {
    const team = { id: unique("tb-claim-team"), template: unique("tb-claim") };
    const db = getDb(env);
    const named = `b-${unique("named")}`.toLowerCase();
    const unnamed = `b-${unique("unnamed")}`.toLowerCase();
    // The write came first: the claim sees the template and leaves its image.
    await upsertTemplate(db, { teamId: team.id, templateId: `${team.template}-first`, public: false, spec: TemplateSpec.parse({ image: named }) });
    expect(await claimUnusedImages(db, [named, unnamed], "local")).toEqual(new Set([unnamed]));
    // The claim came first: the write naming the claimed image fails in the same statement.
    const err = await upsertTemplate(db, { teamId: team.id, templateId: `${team.template}-second`, public: false, spec: TemplateSpec.parse({ image: unnamed }) }).catch((e: unknown) => e);
    expect(namesFreedImage(err)).toBe(true);
    expect(await getTemplate(db, team.id, `${team.template}-second`)).toBeUndefined();
    // Nor can an existing template be changed to name it.
    const moved = await upsertTemplate(db, { teamId: team.id, templateId: `${team.template}-first`, public: false, spec: TemplateSpec.parse({ image: unnamed }) }).catch((e: unknown) => e);
    expect(namesFreedImage(moved)).toBe(true);
    expect((await getTemplate(db, team.id, `${team.template}-first`))?.spec.image).toBe(named);
    // A second claim of the same image claims nothing more (the first delete frees it).
    expect(await claimUnusedImages(db, [unnamed], "local")).toEqual(new Set());
  });

  it("the collection's queries look candidates up by index on sqld: the claim is linear in the cluster's builds, not quadratic", async () => {
    const plan = async (sql: string, args: unknown[]) =>
      (await getDb(env).$client.execute({ sql: `EXPLAIN QUERY PLAN ${sql}`, args: args as never })).rows.map((r) => String(r.detail));
    const claim = await plan(CLAIM_SUPERSEDED_SQL, [0, "x"]);
    expect(claim).toEqual(expect.arrayContaining([
      expect.stringMatching(/SEARCH templates USING INDEX templates_image/),
      expect.stringMatching(/SEARCH t USING COVERING INDEX template_tags_build/),
      expect.stringMatching(/SEARCH c USING INDEX template_builds_base_image/),
    ]));
    // The only full scan is the outer one over the builds.
    expect(claim.filter((d) => d.startsWith("SCAN"))).toEqual(["SCAN b"]);
    const unsent = await plan(UNSENT_FREES_SQL, ["x", 0, 10]);
    expect(unsent).toEqual(expect.arrayContaining([expect.stringMatching(/SEARCH f USING INDEX freed_images_cluster_sent/)]));
    expect(unsent.filter((d) => d.startsWith("SCAN"))).toEqual([]);
  });

  it("removing or moving the tag that kept a superseded build claims its image without another template write", async () => {
    const team = await createTeam(unique("tb-gc-tag"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const name = `${team.template}-tag`;
      const first = (await buildReady(team, agent, name, {}, false, { tags: ["keep", "old"] })).spec;
      await buildReady(team, agent, name, {}, true);
      expect(await collect(team.cluster)).toEqual([]);
      // Moving one of its tags leaves the other: still kept.
      await expectStatus(call("/templates/tags", { key: team.key, body: { target: name, tags: ["old"] } }), 201);
      await expectStatus(call("/templates/tags", { key: team.key, method: "DELETE", body: { name, tags: ["keep"] } }), 204);
      // The tag operation itself asked the cluster for a pass (none of the calls here runs one).
      await vi.waitFor(async () => expect(await claimed(first.image)).toBe(true));
      expect(await collect(team.cluster)).toEqual([first.image]);
    } finally {
      agent.disconnect();
    }
  });

  it("an image no nudge announced (a template written behind the API) is claimed by the periodic pass of a connected cluster", async () => {
    const team = await createTeam(unique("tb-gc-sweep"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const name = `${team.template}-sweep`;
      const first = (await buildReady(team, agent, name, {})).spec;
      const db = getDb(env);
      const teamId = String((await db.$client.execute({ sql: "SELECT id FROM teams WHERE name = ?", args: [team.name] })).rows[0]!.id);
      const t = (await getTemplate(db, teamId, name))!;
      await upsertTemplate(db, { teamId, templateId: name, public: t.public, spec: TemplateSpec.parse({ ...t.spec, image: "base" }) });
      const stub = env.CLUSTER.get(env.CLUSTER.idFromName(team.cluster));
      // The last claiming pass was long ago; the alarm (armed for liveness while connected) runs.
      await runInDurableObject(stub, (instance: ClusterDO, state) => {
        state.storage.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('imageClaimAt', '1')");
        (instance as unknown as { claimedAt: number | undefined }).claimedAt = undefined;
      });
      expect(await claimed(first.image)).toBe(false);
      expect(await runDurableObjectAlarm(stub)).toBe(true);
      expect(await claimed(first.image)).toBe(true);
      expect(await collect(team.cluster)).toEqual([first.image]);
    } finally {
      agent.disconnect();
    }
  });

  it("a build that publishes after its template was deleted: the image is freed then, even though its name was sent before", async () => {
    const team = await createTeam(unique("tb-gc-late"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const name = `${team.template}-late`;
      await expectStatus(call(`/admin/teams/${team.name}/templates/${name}`, { method: "PUT", body: { spec: { cluster: team.cluster } } }), 201);
      const { buildID } = await requestBuild(team.key, name);
      await expectStatus(call(`/v2/templates/${name}/builds/${buildID}`, { key: team.key, body: { steps: [{ type: "RUN", args: ["true"] }] } }), 202);
      await agent.waitUntil(() => agent.builds.some((b) => b.buildId === buildID));
      await expectStatus(call(`/templates/${name}`, { key: team.key, method: "DELETE" }), 204);
      const image = `b-${buildID}`;
      // Claimed with the delete and sent while the agent had not published it yet.
      expect(await collect(team.cluster)).toEqual([image]);
      agent.sendFrame({ type: "buildEvents", items: [{ buildId: buildID, logs: [], result: { status: "ready", user: "user", workdir: "/home/user", env: {} } }] });
      // The result for a build that no longer exists claims its image again: it is sent again.
      await vi.waitFor(async () => expect(await collect(team.cluster)).toEqual([image]));
      await vi.waitFor(() => expect(agent.rootfsDeletes).toEqual([image, image]));
    } finally {
      agent.disconnect();
    }
  });

  it("a team keeps the log lines of its newest LOGGED_BUILDS_PER_TEAM finished builds: an end drops older ones' (their status stays)", async () => {
    const team = await createTeam(unique("tb-logs"));
    const db = getDb(env);
    const teamId = (await db.$client.execute({ sql: "SELECT team_id FROM templates WHERE template_id = ?", args: [team.template] })).rows[0]!.team_id as string;
    const t0 = Date.now() - 3_600_000;
    const old = Array.from({ length: LOGGED_BUILDS_PER_TEAM }, (_, i) => `old-${i}-${unique("b")}`);
    for (const [i, id] of old.entries()) {
      await db.$client.batch([
        { sql: "INSERT INTO template_builds (id, team_id, team_name, template_id, cluster, status, cpu_count, memory_mb, tags, image, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'error', 1, 512, '[]', ?, ?, ?)", args: [id, teamId, team.name, team.template, team.cluster, `b-${id}`, t0 + i, t0 + i] },
        { sql: "INSERT INTO template_build_logs (build_id, seq, at, level, message) VALUES (?, 0, ?, 'info', 'old line')", args: [id, t0 + i] },
      ]);
    }
    const lines = async (id: string) => Number((await db.$client.execute({ sql: "SELECT count(*) AS n FROM template_build_logs WHERE build_id = ?", args: [id] })).rows[0]!.n);
    expect(await lines(old[0]!)).toBe(1);
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const { buildID: id } = await requestBuild(team.key, team.template);
      await expectStatus(call(`/v2/templates/${team.template}/builds/${id}`, { key: team.key, body: {} }), 202);
      agent.sendFrame({ type: "buildEvents", items: [{ buildId: id, logs: [{ seq: 0, at: Date.now(), level: "error", message: "boom" }], result: { status: "error", message: "step 1 (RUN) failed: exit code 1", step: "1" } }] });
      await poll(async () => (await expectStatus(call(`/templates/${team.template}/builds/${id}/status`, { key: team.key }), 200)).status === "error");
      expect(await lines(id)).toBe(1);
      expect(await lines(old[0]!)).toBe(0);
      expect(await lines(old[1]!)).toBe(1);
      expect((await expectStatus(call(`/templates/${team.template}/builds/${old[0]}/status`, { key: team.key }), 200)).status).toBe("error");
    } finally {
      agent.disconnect();
    }
  });

  it("a result is applied once and acked only once stored: a repeat (its ack lost with the session) is acked again and changes nothing, a different later result is ignored", async () => {
    const team = await createTeam(unique("tb-ack"));
    const db = getDb(env);
    const lines = async (id: string) => Number((await db.$client.execute({ sql: "SELECT count(*) AS n FROM template_build_logs WHERE build_id = ?", args: [id] })).rows[0]!.n);
    let agent = await startAgent(team.cluster, { builder: true });
    try {
      const { buildID: id } = await requestBuild(team.key, team.template);
      await expectStatus(call(`/v2/templates/${team.template}/builds/${id}`, { key: team.key, body: { steps: [{ type: "RUN", args: ["true"] }] } }), 202);
      await agent.waitUntil(() => agent.builds.length === 1);
      expect(agent.welcome!.features).toContain("buildAcks");
      const status = async () => (await expectStatus(call(`/templates/${team.template}/builds/${id}/status?logsOffset=0`, { key: team.key }), 200)) as { status: string; logEntries: unknown[] };
      const ready = { status: "ready" as const, user: "root", workdir: "/app", env: { A: "1" } };
      const item = { buildId: id, logs: [{ seq: 0, at: Date.now(), level: "info" as const, message: "done" }], result: ready };
      // Lines alone are not acked, nor is a frame that does not ask (an older agent).
      agent.sendFrame({ type: "buildEvents", ack: true, items: [{ buildId: id, logs: [{ seq: 0, at: Date.now(), level: "info", message: "done" }] }] });
      await poll(async () => (await status()).logEntries.length === 1);
      // The session drops right after the result left: the edge may or may not have had it.
      agent.sendFrame({ type: "buildEvents", ack: true, items: [item] });
      agent.disconnect();
      agent = await startAgent(team.cluster, { builder: true });
      // The agent sends it again on its next session: acked there, once stored.
      agent.sendFrame({ type: "buildEvents", ack: true, items: [item] });
      await agent.waitUntil(() => agent.buildAcks.includes(id));
      expect((await status()).status).toBe("ready");
      const spec = (await expectStatus(call(`/admin/teams/${team.name}/templates/${team.template}`), 200)).spec;
      expect(spec).toMatchObject({ image: `b-${id}`, user: "root", workdir: "/app", env: { A: "1" } });
      // The first session's frame, if the edge had it, may be acked on this session too (the ack
      // goes on the session open when its writes are done): harmless, counted from here on.
      await new Promise((r) => setTimeout(r, 300));
      const base = agent.buildAcks.length;
      // Once more, and then a different result for the same build: acked, and nothing changes.
      agent.sendFrame({ type: "buildEvents", ack: true, items: [item] });
      await agent.waitUntil(() => agent.buildAcks.length === base + 1);
      agent.sendFrame({ type: "buildEvents", ack: true, items: [{ buildId: id, logs: [], result: { status: "error", message: "late" } }] });
      await agent.waitUntil(() => agent.buildAcks.length === base + 2);
      agent.sendFrame({ type: "buildEvents", items: [{ buildId: id, logs: [], result: { status: "ready", user: "other", workdir: "/", env: {} } }] });
      await new Promise((r) => setTimeout(r, 200));
      expect(agent.buildAcks.slice(base)).toEqual([id, id]);
      const after = await expectStatus(call(`/templates/${team.template}/builds/${id}/status`, { key: team.key }), 200);
      expect(after.status).toBe("ready");
      expect(after.reason).toBeUndefined();
      expect(await lines(id)).toBe(1);
      expect((await expectStatus(call(`/admin/teams/${team.name}/templates/${team.template}`), 200)).spec).toEqual(spec);
      // A build this edge does not have (deleted with its template) is acked too: nothing to store.
      agent.sendFrame({ type: "buildEvents", ack: true, items: [{ buildId: "0".repeat(8), logs: [], result: ready }] });
      await agent.waitUntil(() => agent.buildAcks.length === base + 3);
      expect(agent.buildAcks.at(-1)).toBe("0".repeat(8));
    } finally {
      agent.disconnect();
    }
  });

  it("a result whose writes fail is not acked (the agent keeps it); sent again once the store works, it is acked and the build is ready", async () => {
    const team = await createTeam(unique("tb-hold"));
    const db = getDb(env);
    const agent = await startAgent(team.cluster, { builder: true });
    let trig = "";
    try {
      const { buildID: id } = await requestBuild(team.key, team.template);
      await expectStatus(call(`/v2/templates/${team.template}/builds/${id}`, { key: team.key, body: { steps: [{ type: "RUN", args: ["true"] }] } }), 202);
      await agent.waitUntil(() => agent.builds.length === 1);
      // The build's end cannot be written (as in a libSQL outage): the edge must not ack it.
      trig = `held_${id.replace(/-/g, "_")}`;
      await db.$client.execute(`CREATE TRIGGER ${trig} BEFORE UPDATE OF status ON template_builds WHEN OLD.id = '${id}' BEGIN SELECT RAISE(ABORT, 'held by the test'); END`);
      const status = async () => ((await expectStatus(call(`/templates/${team.template}/builds/${id}/status`, { key: team.key }), 200)) as { status: string }).status;
      const item = { buildId: id, logs: [], result: { status: "ready" as const, user: "root", workdir: "/", env: {} } };
      agent.sendFrame({ type: "buildEvents", ack: true, items: [item] });
      // A second frame that stores fine (a build the edge does not have): its ack, and a pause after
      // it, give the first frame time to be handled (a failed store sends nothing to wait for).
      agent.sendFrame({ type: "buildEvents", ack: true, items: [{ buildId: "0".repeat(8), logs: [], result: item.result }] });
      await agent.waitUntil(() => agent.buildAcks.includes("0".repeat(8)));
      await new Promise((r) => setTimeout(r, 300));
      expect(agent.buildAcks).not.toContain(id);
      expect(await status()).toBe("building");
      await db.$client.execute(`DROP TRIGGER ${trig}`);
      agent.sendFrame({ type: "buildEvents", ack: true, items: [item] });
      await agent.waitUntil(() => agent.buildAcks.includes(id));
      expect(await status()).toBe("ready");
    } finally {
      await db.$client.execute(`DROP TRIGGER IF EXISTS ${trig || "none"}`);
      agent.disconnect();
    }
  });

  it("a failing build is status error with the reason and its last log lines", async () => {
    const team = await createTeam(unique("tb-fail"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const { buildID: id } = await requestBuild(team.key, team.template);
      await expectStatus(call(`/v2/templates/${team.template}/builds/${id}`, { key: team.key, body: { steps: [{ type: "RUN", args: ["exit 3"] }] } }), 202);
      await agent.waitUntil(() => agent.builds.length === 1);
      expect(agent.builds[0]!.from).toEqual({ image: "e2bdev/base" });
      agent.sendFrame({
        type: "buildEvents",
        items: [{ buildId: id, logs: [{ seq: 0, at: Date.now(), level: "error", message: "boom", step: "1" }], result: { status: "error", message: "step 1 (RUN) failed: exit code 3", step: "1" } }],
      });
      let s: any;
      await poll(async () => (s = await expectStatus(call(`/templates/${team.template}/builds/${id}/status`, { key: team.key }), 200)).status === "error");
      expect(s.reason).toMatchObject({ message: "step 1 (RUN) failed: exit code 3", step: "1", logEntries: [{ message: "boom", level: "error" }] });
    } finally {
      agent.disconnect();
    }
  });

  it("a build whose agent reports nothing for 30 minutes is failed, saying so", async () => {
    const team = await createTeam(unique("tb-silent"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const { buildID: id } = await requestBuild(team.key, team.template);
      await expectStatus(call(`/v2/templates/${team.template}/builds/${id}`, { key: team.key, body: {} }), 202);
      const status = () => expectStatus(call(`/templates/${team.template}/builds/${id}/status`, { key: team.key }), 200);
      expect((await status()).status).toBe("building");
      // The agent went away mid-build: its last word is older than the silence bound.
      await getDb(env).update(templateBuilds).set({ updatedAt: Date.now() - BUILD_SILENCE_MS - 1000 }).where(eq(templateBuilds.id, id));
      expect(await status()).toMatchObject({ status: "error", reason: { message: expect.stringMatching(/reported nothing for 30 minutes/) } });
      // Its events after that change nothing.
      agent.sendFrame({ type: "buildEvents", items: [{ buildId: id, logs: [], result: { status: "ready", user: "user", workdir: "/", env: {} } }] });
      await new Promise((r) => setTimeout(r, 200));
      expect((await status()).status).toBe("error");
    } finally {
      agent.disconnect();
    }
  });

  it("a build runs under its team's quota: it holds its vCPUs while it builds, a build past the quota is a 429 naming it, and its end frees them", async () => {
    const team = await createTeam(unique("tb-quota"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      await expectStatus(call(`/admin/teams/${team.name}/quota`, { method: "PUT", body: { vcpus: 1 } }), 200);
      const start = (id: string) => call(`/v2/templates/${team.template}/builds/${id}`, { key: team.key, body: {} });
      const first = await requestBuild(team.key, team.template);
      await expectStatus(start(first.buildID), 202);
      const second = await requestBuild(team.key, team.template);
      await expectError(start(second.buildID), 429, /quota vcpus/);
      expect(agent.builds.map((b) => b.buildId)).toEqual([first.buildID]);
      agent.sendFrame({ type: "buildEvents", items: [{ buildId: first.buildID, logs: [], result: { status: "error", message: "step 1 (RUN) failed: exit code 1", step: "1" } }] });
      await poll(async () => (await expectStatus(call(`/templates/${team.template}/builds/${first.buildID}/status`, { key: team.key }), 200)).status === "error");
      await expectStatus(start(second.buildID), 202);
      await agent.waitUntil(() => agent.builds.some((b) => b.buildId === second.buildID));
    } finally {
      agent.disconnect();
    }
  });

  it("a team runs at most MAX_TEAM_BUILDS builds even when its starts race: the rest are 429 and hold no quota", async () => {
    const team = await createTeam(unique("tb-race"));
    const agent = await startAgent(team.cluster, { builder: true });
    try {
      const ids = await Promise.all(Array.from({ length: 6 }, async () => (await requestBuild(team.key, team.template)).buildID as string));
      const answers = await Promise.all(ids.map((id) => call(`/v2/templates/${team.template}/builds/${id}`, { key: team.key, body: {} })));
      const started = ids.filter((_, i) => answers[i]!.status === 202);
      expect(started).toHaveLength(MAX_TEAM_BUILDS);
      for (const r of answers) if (r.status !== 202) await expectError(Promise.resolve(r), 429, /already runs 2 builds/);
      await agent.waitUntil(() => agent.builds.length === MAX_TEAM_BUILDS);
      expect(agent.builds.map((b) => b.buildId).sort()).toEqual([...started].sort());
      // The refused ones still wait and start once a slot is free; their quota was given back.
      const quota = await expectStatus(call(`/admin/teams/${team.name}/quota`), 200);
      expect(quota.usage).toMatchObject({ vcpus: MAX_TEAM_BUILDS });
      agent.sendFrame({ type: "buildEvents", items: [{ buildId: started[0]!, logs: [], result: { status: "error", message: "step 1 (RUN) failed: exit code 1", step: "1" } }] });
      await poll(async () => (await expectStatus(call(`/templates/${team.template}/builds/${started[0]}/status`, { key: team.key }), 200)).status === "error");
      const waiting = ids.find((id) => !started.includes(id))!;
      await expectStatus(call(`/v2/templates/${team.template}/builds/${waiting}`, { key: team.key, body: {} }), 202);
    } finally {
      agent.disconnect();
    }
  });

  it("a team has at most MAX_TEAM_WAITING_BUILDS builds requested and not started, even when requests race: the oldest fail, as does one not started in a day", async () => {
    const team = await createTeam(unique("tb-waiting"));
    const n = MAX_TEAM_WAITING_BUILDS + 4;
    const ids = await Promise.all(Array.from({ length: n }, async () => (await requestBuild(team.key, team.template)).buildID as string));
    const status = async (id: string) => expectStatus(call(`/templates/${team.template}/builds/${id}/status`, { key: team.key }), 200);
    const states = await Promise.all(ids.map(status));
    expect(states.filter((s) => s.status === "waiting")).toHaveLength(MAX_TEAM_WAITING_BUILDS);
    const failed = states.filter((s) => s.status === "error");
    expect(failed).toHaveLength(4);
    for (const s of failed) expect(s.reason.message).toBe(`never started: the team requested ${MAX_TEAM_WAITING_BUILDS} builds after it`);
    // Another team's are not touched by this one's.
    const other = await createTeam(unique("tb-waiting-other"));
    const mine = (await requestBuild(other.key, other.template)).buildID as string;
    // The oldest waiting one is past the day: the next request fails it, saying so.
    const waiting = ids.filter((_, i) => states[i]!.status === "waiting");
    await getDb(env).update(templateBuilds).set({ createdAt: Date.now() - WAITING_BUILD_TTL_MS - 1000 }).where(eq(templateBuilds.id, waiting[0]!));
    await requestBuild(team.key, team.template);
    expect(await status(waiting[0]!)).toMatchObject({ status: "error", reason: { message: "never started: not started within 24 h of its request" } });
    expect((await expectStatus(call(`/templates/${other.template}/builds/${mine}/status`, { key: other.key }), 200)).status).toBe("waiting");
  });

  it("an upload of an archive the team has is answered before its body is read; a team's uploads are read at most MAX_TEAM_UPLOADS_IN_FLIGHT at once, the next ones wait their turn", async () => {
    const team = await createTeam(unique("tb-up"));
    await requestBuild(team.key, team.template);
    const linkOf = async (hash: string) => {
      const u = new URL((await expectStatus(call(`/templates/${team.template}/files/${hash}`, { key: team.key }), 201)).url);
      return `${u.pathname}${u.search}`;
    };
    const stored = await linkOf(HASH);
    await expectStatus(call(stored, { key: null, method: "PUT", raw: "tar bytes" }), 201);
    // Stored: a PUT past the size bound is answered 201 without its body being read (no 413).
    await expectStatus(call(stored, { key: null, method: "PUT", raw: "x".repeat(MAX_TEMPLATE_FILE_BYTES + 1) }), 201);

    // Bodies that are still coming: each upload is being read once its stream is pulled.
    const [one, two, three] = await Promise.all(["1", "2", "3"].map((c) => linkOf(c.repeat(64))));
    const slow = [one!, two!].map((path) => {
      let ctl!: ReadableStreamDefaultController<Uint8Array>;
      let pulled!: () => void;
      const reading = new Promise<void>((r) => (pulled = r));
      const body = new ReadableStream<Uint8Array>({ start: (c) => void (ctl = c), pull: () => pulled() });
      const res = exports.default.fetch(`http://edge.test${path}`, { method: "PUT", body, duplex: "half" } as RequestInit);
      return { ctl, reading, res };
    });
    await Promise.all(slow.map((s) => s.reading));
    // The runtime may pull a body before the route reads it: until both turns are held, a third
    // upload is read too (one past the size bound, so it is a 413 and nothing is stored); then it
    // waits its turn, unread, as do MAX_TEAM_UPLOADS_WAITING of them; one more is refused.
    const tooBig = "x".repeat(MAX_TEMPLATE_FILE_BYTES + 1);
    const later = Symbol("still waiting");
    const waiting: Promise<Response>[] = [];
    for (let i = 0; i < 20 && !waiting.length; i++) {
      const r = call(three!, { key: null, method: "PUT", raw: tooBig });
      const first = await Promise.race([r, new Promise<typeof later>((ok) => setTimeout(() => ok(later), 300))]);
      if (first === later) waiting.push(r);
      else expect({ status: first.status, body: await first.text() }).toMatchObject({ status: 413 });
    }
    expect(waiting).toHaveLength(1);
    while (waiting.length < MAX_TEAM_UPLOADS_WAITING - 1) waiting.push(call(three!, { key: null, method: "PUT", raw: tooBig }));
    // Each first asks whether the archive is stored, so one sent now may overtake those: it waits
    // too, until the waiting are MAX_TEAM_UPLOADS_WAITING and the next one is refused.
    let refused: Response | undefined;
    for (let i = 0; i < 20 && !refused; i++) {
      const r = call(three!, { key: null, method: "PUT", raw: tooBig });
      const first = await Promise.race([r, new Promise<typeof later>((ok) => setTimeout(() => ok(later), 300))]);
      if (first === later) waiting.push(r);
      else refused = first;
    }
    expect(waiting.length).toBeGreaterThanOrEqual(MAX_TEAM_UPLOADS_WAITING);
    await expectError(refused ?? Promise.reject(new Error("never refused")), 429, `the team already has ${MAX_TEAM_UPLOADS_IN_FLIGHT + MAX_TEAM_UPLOADS_WAITING} uploads in progress`);
    for (const s of slow) {
      s.ctl.enqueue(new TextEncoder().encode("tar bytes"));
      s.ctl.close();
    }
    for (const s of slow) await expectStatus(s.res, 201);
    // Each waiting one had its turn and was read (past the size bound: nothing stored).
    for (const r of waiting) expect((await r).status).toBe(413);
    await expectStatus(call(three!, { key: null, method: "PUT", raw: "tar" }), 201);
  });

  it("a team's stored build archives are bounded in bytes (each at least 4 KiB) and those unused for a week go at its next upload", async () => {
    const db = getDb(env);
    const team = `tb-files-${unique("t")}`;
    const bounds = { maxTeamBytes: 12 * 1024, ttlMs: TEMPLATE_FILE_TTL_MS };
    const bytes = (n: number) => new Uint8Array(n).buffer;
    const stored = async (t: string, h: string) => (await db.$client.execute({ sql: "SELECT 1 FROM template_files WHERE team_id = ? AND hash = ?", args: [t, h] })).rows.length > 0;
    const [a, b, z, y] = ["a", "b", "c", "d"].map((x) => x.repeat(64)) as [string, string, string, string];
    const now = Date.now();
    expect(await putFile(db, team, a, bytes(8192), bounds, now)).toBe(true);
    expect(await putFile(db, team, b, bytes(5120), bounds, now)).toBe(false);
    expect(await stored(team, b)).toBe(false);
    expect(await putFile(db, team, a, bytes(8192), bounds, now)).toBe(true); // already there
    expect(await putFile(db, `${team}-other`, b, bytes(5120), bounds, now)).toBe(true); // per team
    // An empty archive still costs 4 KiB: one fits, a second does not.
    expect(await putFile(db, team, z, bytes(0), bounds, now)).toBe(true);
    expect(await putFile(db, team, y, bytes(0), bounds, now)).toBe(false);
    // A week later `a` was used by a build two days ago: it stays (z goes), and still fills the bound with y.
    expect([...(await useFiles(db, team, [a, b], now + 5 * 86_400_000))]).toEqual([a]);
    expect(await putFile(db, team, b, bytes(5120), bounds, now + 7 * 86_400_000 + 1)).toBe(false);
    expect([await stored(team, a), await stored(team, z)]).toEqual([true, false]);
    // A week after that use it is gone too, and the upload is taken.
    expect(await putFile(db, team, b, bytes(5120), bounds, now + 12 * 86_400_000 + 1)).toBe(true);
    expect([await stored(team, a), await stored(team, b)]).toEqual([false, true]);
  });

  it("a cluster without a builder answers 501 and says so", async () => {
    const team = await createTeam(unique("tb-nobuilder"));
    const agent = await startAgent(team.cluster);
    try {
      const { buildID: id } = await requestBuild(team.key, team.template);
      await expectError(call(`/v2/templates/${team.template}/builds/${id}`, { key: team.key, body: {} }), 501, /no template builder/);
      const s = await expectStatus(call(`/templates/${team.template}/builds/${id}/status`, { key: team.key }), 200);
      expect(s).toMatchObject({ status: "error", reason: { message: expect.stringMatching(/no template builder/) } });
      expect(agent.builds).toEqual([]);
    } finally {
      agent.disconnect();
    }
  });
});

async function poll(ok: () => Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await ok())) {
    if (Date.now() > until) throw new Error("condition not met");
    await new Promise((r) => setTimeout(r, 20));
  }
}
