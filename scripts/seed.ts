// Seeds the admin team, the admin key (from ADMIN_API_KEY) and the public `base` template,
// idempotently. The launcher calls `seed()` after migrating; with `edgeUrl` the template goes
// through the edge's admin API so its PoolDO is configured and starts warming at once.
//   node scripts/seed.ts <libsql-url>     (reads ADMIN_API_KEY, KEY_PEPPER, EDGE_URL)
import { eq } from "drizzle-orm";
import { ADMIN_KEY_ID, ADMIN_TEAM_ID, ADMIN_TEAM_NAME, hashApiKey, looksLikeApiKey, maskApiKey } from "../schema/api/api-key.ts";
import { getDb } from "../durable-objects/store/db.ts";
import { ensureTeam } from "../durable-objects/store/teams.ts";
import { upsertTemplate } from "../durable-objects/store/templates.ts";
import { insertBinding } from "../durable-objects/store/team-clusters.ts";
import { TemplateSpec } from "../schema/api/template.ts";
import { apiKeys } from "../schema/db/tables.ts";
import { RootfsStore } from "../controllers/drivers/local/rootfs/store.ts";
import { buildCodeInterpreterOnEdge, CODE_INTERPRETER, isCurrentCodeInterpreter } from "./lib/templates.ts";

export interface SeedOptions {
  libsqlUrl: string;
  libsqlAuthToken?: string;
  adminApiKey: string;
  pepper: string;
  /** Warm members of `base` (its SandboxSet replicas). */
  baseReplicas?: number;
  /** A running edge: the template is written through its admin API (configures the pool). */
  edgeUrl?: string;
  /** `base`'s root filesystem on this machine (`RootfsStore.rootfsId`), when it is built. */
  baseRootfsId?: string;
}

export async function seed(opts: SeedOptions): Promise<void> {
  if (!looksLikeApiKey(opts.adminApiKey)) throw new Error("ADMIN_API_KEY must be e2b_ followed by 40 hex digits");
  const db = getDb({ LIBSQL_URL: opts.libsqlUrl, LIBSQL_AUTH_TOKEN: opts.libsqlAuthToken });
  const team = await ensureTeam(db, ADMIN_TEAM_NAME, ADMIN_TEAM_ID);
  const keyHash = await hashApiKey(opts.adminApiKey, opts.pepper);
  const mask = maskApiKey(opts.adminApiKey);
  const row = {
    id: ADMIN_KEY_ID,
    teamId: team.id,
    name: "admin",
    keyHash,
    maskPrefix: mask.maskedValuePrefix,
    maskSuffix: mask.maskedValueSuffix,
    valueLength: mask.valueLength,
    createdBy: null,
    createdAt: Date.now(),
    lastUsed: null,
  };
  // A rotated ADMIN_API_KEY replaces the stored hash.
  await db.insert(apiKeys).values(row).onConflictDoUpdate({ target: apiKeys.id, set: { keyHash, maskPrefix: row.maskPrefix, maskSuffix: row.maskSuffix } });
  const spec = TemplateSpec.parse({ replicas: opts.baseReplicas ?? 2, rootfsId: opts.baseRootfsId });
  if (opts.edgeUrl) {
    const res = await fetch(new URL(`/admin/teams/${ADMIN_TEAM_NAME}/templates/base`, opts.edgeUrl), {
      method: "PUT",
      headers: { "content-type": "application/json", "x-api-key": opts.adminApiKey },
      body: JSON.stringify({ public: true, spec }),
    });
    if (!res.ok) throw new Error(`seeding template base through ${opts.edgeUrl}: ${res.status} ${await res.text()}`);
  } else {
    // As the admin API would (operations/templates.ts): the template's cluster serves its team.
    await upsertTemplate(db, { teamId: team.id, templateId: "base", public: true, spec });
    await insertBinding(db, team.id, spec.cluster);
  }
  const stored = await db.select({ id: apiKeys.id }).from(apiKeys).where(eq(apiKeys.id, ADMIN_KEY_ID));
  if (stored.length !== 1) throw new Error("admin key was not stored");
}

/** The names the code interpreter's template answers to: E2B's, and the one the current
 * SDKs create by default. Both name the rootfs of the same build. */
export const CODE_INTERPRETER_TEMPLATES = ["code-interpreter-v1", "code-interpreter"] as const;

/**
 * The public code-interpreter templates through a running edge: `code-interpreter` built through
 * the edge's HTTP build API unless its current build is of the current definition (`build:
 * "changed"`, as `npm start` and the test systems do: a changed definition or base is built again,
 * an unchanged one keeps its build, its record and its warm members; "missing": only when it has
 * no build yet, as a test file's setup does), then both names put through the admin API with the
 * built spec, `codeInterpreter: true` (its port 49999 is the interpreter) and `replicas` warm
 * members for the SDKs' default, each only if that differs from what is there. A new build is a
 * new revision, so its pool rolls.
 */
export async function seedCodeInterpreter(edgeUrl: string, adminApiKey: string, replicas: number, opts: { build?: "changed" | "missing"; log?: (line: string) => void; store?: RootfsStore } = {}): Promise<void> {
  const headers = { "content-type": "application/json", "x-api-key": adminApiKey };
  const url = (name: string) => new URL(`/admin/teams/${ADMIN_TEAM_NAME}/templates/${name}`, edgeUrl);
  const current = async (name: string) => {
    const got = await fetch(url(name), { headers });
    if (got.status === 404) return undefined;
    if (!got.ok) throw new Error(`reading template ${name}: ${got.status} ${await got.text()}`);
    return (await got.json()) as { public: boolean; spec: TemplateSpec };
  };
  const log = opts.log ?? (() => undefined);
  let spec = (await current(CODE_INTERPRETER))?.spec;
  const built = spec?.image.startsWith("b-") === true;
  if (!built || (opts.build === "changed" && !(await isCurrentCodeInterpreter(opts.store ?? new RootfsStore(), TemplateSpec.parse(spec!))))) {
    const r = await buildCodeInterpreterOnEdge(edgeUrl, adminApiKey, log);
    log(`build ${r.buildId} ready in ${r.seconds} s: ${r.ran} step(s) built, ${r.cached} cached`);
    spec = (await current(CODE_INTERPRETER))?.spec;
    if (!spec) throw new Error(`template ${CODE_INTERPRETER} is missing after its build`);
  } else log(`${spec!.image} is the build of the current definition: kept`);
  for (const name of CODE_INTERPRETER_TEMPLATES) {
    const body = { public: true, spec: TemplateSpec.parse({ ...spec, codeInterpreter: true, replicas: name === CODE_INTERPRETER_TEMPLATES[0] ? replicas : 0 }) };
    const now = await current(name);
    if (now && now.public && JSON.stringify(TemplateSpec.parse(now.spec)) === JSON.stringify(body.spec)) continue;
    const res = await fetch(url(name), { method: "PUT", headers, body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`seeding template ${name} through ${edgeUrl}: ${res.status} ${await res.text()}`);
  }
}

/**
 * Tells an admin team's template that its root filesystem is now `rootfsId` (the rest of the spec
 * as it is: a scale or edit made meanwhile stays). The revision changes, so its pool replaces the
 * unclaimed members made before (those on the host's view while `base` was building); claimed
 * sandboxes are not touched.
 */
export async function putTemplateRootfs(edgeUrl: string, adminApiKey: string, templateId: string, rootfsId: string): Promise<void> {
  const url = new URL(`/admin/teams/${ADMIN_TEAM_NAME}/templates/${templateId}`, edgeUrl);
  const headers = { "content-type": "application/json", "x-api-key": adminApiKey };
  const got = await fetch(url, { headers });
  if (!got.ok) throw new Error(`reading template ${templateId}: ${got.status} ${await got.text()}`);
  const t = (await got.json()) as { public: boolean; spec: TemplateSpec };
  const res = await fetch(url, { method: "PUT", headers, body: JSON.stringify({ public: t.public, spec: { ...t.spec, rootfsId } }) });
  if (!res.ok) throw new Error(`putting template ${templateId}'s root filesystem: ${res.status} ${await res.text()}`);
}

if (import.meta.main) {
  const libsqlUrl = process.argv[2] ?? process.env.LIBSQL_URL;
  const adminApiKey = process.env.ADMIN_API_KEY;
  const pepper = process.env.KEY_PEPPER;
  if (!libsqlUrl || !adminApiKey || !pepper) {
    console.error("usage: ADMIN_API_KEY=e2b_… KEY_PEPPER=… [EDGE_URL=…] node scripts/seed.ts <libsql-url>");
    process.exit(2);
  }
  await seed({ libsqlUrl, adminApiKey, pepper, edgeUrl: process.env.EDGE_URL, libsqlAuthToken: process.env.LIBSQL_AUTH_TOKEN });
  console.log("seeded admin team, admin key and template base");
}
