// The cluster's custom resources, applied on the edge (schema/protocol/crd-sync.ts): SandboxSets
// become templates and warm pools of team = namespace (the admin API's path), kubectl requests
// become the sandbox's pause/resume/kill (its SandboxGroupDO) as the sandbox's owner (the E2B API's rules), claims
// become creates from the team's pool (the create operation the E2B route uses, with typed input). The edge stays the
// authority: a cluster acts only in the namespaces of teams bound to it (operations/team-clusters.ts),
// a SandboxSet's older generation never overwrites a newer one, a template another
// cluster runs is not taken over, and a request made against an older sandbox generation than the
// edge's is answered `stale`. A deleted warm pool member is reported to its pool as failed.
import type { TemplateSpec } from "../../schema/api/template.ts";
import { DEFAULT_TIMEOUT_S } from "../../schema/api/limits.ts";
import { ErrorCode, type Refusal } from "../../schema/errors.ts";
import {
  CLAIM_METADATA_KEY,
  type ClaimItem,
  type Observation,
  type ReplyItem,
  type SandboxId,
  type SandboxRequestItem,
  type SandboxSetItem,
  type TeamQuotaItem,
  type PoolAutoscalerItem,
  type UpdateOpsItem,
  type TrafficPolicyItem,
  type SecurityProfileItem,
} from "../../schema/protocol/index.ts";
import { applyTrafficPolicy } from "./crd-traffic.ts";
import { applySecurityProfile } from "./crd-security.ts";
import { clipText, MAX_MESSAGE_LENGTH } from "../../schema/api/limits.ts";
import { applyTeamQuota, CRD_QUOTA_SCHEMA } from "./crd-quota.ts";
import { applyPoolAutoscaler, CRD_AUTOSCALER_SCHEMA, prunePoolAutoscalers } from "./crd-autoscalers.ts";
import { applyUpdateOps, CRD_UPDATE_OPS_SCHEMA, pruneUpdateOps } from "./crd-updateops.ts";
import { annotationsProblem } from "../../schema/crd/user-metadata.ts";
import { checkInplaceUpdate, parseCreateExtensions } from "../../schema/api/extensions.ts";
import { NewSandboxV2 } from "../../schema/api/sandbox.ts";
import { ApiError } from "../../schema/errors.ts";
import type { Caller, Env } from "../env.ts";
import { createSandbox } from "../operations/create-sandbox.ts";
import { putTemplate, removeTemplate } from "../operations/templates.ts";
import { clusterMayServe, clusterStillServes, unboundRefusal } from "../operations/team-clusters.ts";
import { getDb } from "../store/db.ts";
import { KeyedSerial } from "../../lib/keyed-serial.ts";
import { listSummaries } from "../store/sandbox-index.ts";
import { getTemplate } from "../store/templates.ts";
import { findTeamByName } from "../store/teams.ts";
import { sandboxHandle } from "../sandbox/stub.ts";
import type { DesiredEntry } from "./machine.ts";

type Sql = Pick<SqlStorage, "exec">;

/** Claims per item handled at once (upstream's SandboxClaim controller batches at most 50). */
const CLAIM_BATCH = 50;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS crd_sandboxsets (
  namespace TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, generation INTEGER NOT NULL,
  deleted INTEGER NOT NULL, PRIMARY KEY (namespace, name)
);
`;

interface SetRecord {
  uid: string;
  generation: number;
  deleted: boolean;
}

export interface CrdSyncOptions {
  env: Env;
  sql: Sql;
  /** This ClusterDO's cluster name (members of synced SandboxSets run there). */
  cluster: () => string;
  /** The cluster's desired entry for a sandbox (who owns it: a pool while it is a warm member). */
  desired: (id: SandboxId) => DesiredEntry | undefined;
  reply: (items: ReplyItem[]) => void;
  log?: (msg: string) => void;
}

export class CrdSync {
  readonly #o: CrdSyncOptions;
  /** Items about one object run one after another, in arrival order. */
  readonly #chains = new KeyedSerial();

  constructor(opts: CrdSyncOptions) {
    this.#o = opts;
    opts.sql.exec(SCHEMA);
    opts.sql.exec(CRD_QUOTA_SCHEMA);
    opts.sql.exec(CRD_AUTOSCALER_SCHEMA);
    opts.sql.exec(CRD_UPDATE_OPS_SCHEMA);
  }

  /** Starts every item; each is answered when done (the socket is never held up). */
  handle(msg: { type: "sandboxsets"; items: SandboxSetItem[] } | { type: "requests"; items: SandboxRequestItem[] } | { type: "claims"; items: ClaimItem[] } | { type: "quotas"; items: TeamQuotaItem[] } | { type: "autoscalers"; items: PoolAutoscalerItem[] } | { type: "updateops"; items: UpdateOpsItem[] } | { type: "trafficpolicyobjects"; items: TrafficPolicyItem[] } | { type: "securityprofileobjects"; items: SecurityProfileItem[] }): void {
    for (const item of msg.items) {
      switch (msg.type) {
        case "sandboxsets": {
          const set = item as SandboxSetItem;
          if ("present" in set) this.#answer(set.id, `sets:${set.namespace}`, this.#prune(set.namespace, set.present));
          else this.#answer(set.id, `set:${set.namespace}/${set.name}`, this.#serial(`set:${set.namespace}/${set.name}`, () => this.#sandboxSet(set)));
          break;
        }
        case "requests": {
          const req = item as SandboxRequestItem;
          this.#answer(req.id, `sbx:${req.sandboxId}`, this.#serial(`sbx:${req.sandboxId}`, () => this.#request(req)));
          break;
        }
        case "claims": {
          const claim = item as ClaimItem;
          this.#answer(claim.id, `claim:${claim.claim.uid}`, this.#serial(`claim:${claim.claim.uid}`, () => this.#claim(claim)));
          break;
        }
        case "quotas": {
          const q = item as TeamQuotaItem;
          this.#answer(q.id, `quota:${q.namespace}`, this.#serial(`quota:${q.namespace}`, () => applyTeamQuota(this.#o.env, this.#o.sql, this.#o.cluster(), q)));
          break;
        }
        case "autoscalers": {
          const a = item as PoolAutoscalerItem;
          const serial = (name: string, work: () => Promise<Omit<ReplyItem, "id">>) => this.#serial(`pa:${a.namespace}/${name}`, work);
          if ("present" in a) this.#answer(a.id, `pas:${a.namespace}`, prunePoolAutoscalers(this.#o.env, this.#o.sql, this.#o.cluster(), a.namespace, a.present, serial));
          else this.#answer(a.id, `pa:${a.namespace}/${a.name}`, serial(a.name, () => applyPoolAutoscaler(this.#o.env, this.#o.sql, this.#o.cluster(), a)));
          break;
        }
        case "updateops": {
          const u = item as UpdateOpsItem;
          const serial = (name: string, work: () => Promise<Omit<ReplyItem, "id">>) => this.#serial(`suo:${u.namespace}/${name}`, work);
          if ("present" in u) this.#answer(u.id, `suos:${u.namespace}`, pruneUpdateOps(this.#o.env, this.#o.sql, this.#o.cluster(), u.namespace, u.present, serial));
          else this.#answer(u.id, `suo:${u.namespace}/${u.name}`, serial(u.name, () => applyUpdateOps(this.#o.env, this.#o.sql, this.#o.cluster(), u)));
          break;
        }
        case "trafficpolicyobjects": {
          const t = item as TrafficPolicyItem;
          const key = `tp:${t.namespace ?? ""}/${t.name}`;
          this.#answer(t.id, key, this.#serial(key, () => applyTrafficPolicy(this.#o.env, this.#o.cluster(), t)));
          break;
        }
        case "securityprofileobjects": {
          const p = item as SecurityProfileItem;
          const key = "present" in p ? `sps:${p.namespace}` : `sp:${p.namespace}/${p.name}`;
          this.#answer(p.id, key, this.#serial(key, () => applySecurityProfile(this.#o.env, this.#o.cluster(), p)));
          break;
        }
      }
    }
  }

  /** Runs `work` after everything queued under `key` (items about one object keep their order). */
  #serial<T>(key: string, work: () => Promise<T>): Promise<T> {
    return this.#chains.run(key, work);
  }

  #answer(id: string, what: string, work: Promise<Omit<ReplyItem, "id">>): void {
    void work
      .catch((err): Omit<ReplyItem, "id"> => {
        const known = err instanceof ApiError;
        if (!known) this.#o.log?.(`cluster: crd sync ${what}: ${String(err)}`);
        return { result: "rejected", code: known ? err.code : "internal_server_error", message: known ? err.message : String(err) };
      })
      // A reply's message is bounded (schema/protocol/crd-sync.ts); a refusal's text may be longer.
      .then((reply) => this.#o.reply([{ id, ...reply, ...(reply.message && { message: clipText(reply.message, MAX_MESSAGE_LENGTH) }) }]));
  }

  #record(namespace: string, name: string): SetRecord | undefined {
    const row = this.#o.sql
      .exec<{ uid: string; generation: number; deleted: number }>("SELECT uid, generation, deleted FROM crd_sandboxsets WHERE namespace = ? AND name = ?", namespace, name)
      .toArray()[0];
    return row && { uid: row.uid, generation: row.generation, deleted: row.deleted === 1 };
  }

  #remember(namespace: string, name: string, r: SetRecord): void {
    this.#o.sql.exec(
      "INSERT OR REPLACE INTO crd_sandboxsets (namespace, name, uid, generation, deleted) VALUES (?, ?, ?, ?, ?)",
      namespace,
      name,
      r.uid,
      r.generation,
      r.deleted ? 1 : 0,
    );
  }

  /** Deletes what this cluster synced into the namespace and no longer has. */
  async #prune(namespace: string, present: string[]): Promise<Omit<ReplyItem, "id">> {
    const keep = new Set(present);
    const gone = this.#o.sql
      .exec<{ name: string; uid: string }>("SELECT name, uid FROM crd_sandboxsets WHERE namespace = ? AND deleted = 0", namespace)
      .toArray()
      .filter((r) => !keep.has(r.name));
    for (const r of gone) {
      // In the object's own chain, so it cannot interleave with an upsert of the same name.
      await this.#serial(`set:${namespace}/${r.name}`, () => this.#sandboxSet({ id: "", namespace, name: r.name, uid: r.uid, deleted: true }));
    }
    return { result: "applied", message: gone.length ? `removed ${gone.map((r) => r.name).join(", ")}` : "nothing to remove" };
  }

  async #sandboxSet(item: Exclude<SandboxSetItem, { present: string[] }>): Promise<Omit<ReplyItem, "id">> {
    const prev = this.#record(item.namespace, item.name);
    const cluster = this.#o.cluster();
    const db = getDb(this.#o.env);
    // Only a cluster bound to the team may make or remove its templates (and so its pools). A
    // delete from an unbound one has nothing of this cluster's to remove (a template here binds
    // its team): answered done, so the agent does not retry it for ever, and this cluster's own
    // record of the object marked deleted, so its next start does not prune it again.
    const may = await clusterMayServe(this.#o.env, cluster, item.namespace);
    if (!may.ok) {
      if (!("deleted" in item)) return refused(may.error);
      if (prev && prev.uid === item.uid && !prev.deleted) this.#remember(item.namespace, item.name, { ...prev, deleted: true });
      return { result: "applied", message: may.error.message };
    }
    const team = may.team;
    // A template whose members run on another cluster is that cluster's (or the admin API's): two
    // clusters with the same SandboxSet name in one namespace must not move the pool back and forth.
    const existing = team && (await getTemplate(db, team.id, item.name));
    const foreign = existing && existing.spec.cluster !== cluster ? existing.spec.cluster : undefined;
    if ("deleted" in item) {
      // A delete of an object the edge already replaced by a newer one (same name, new uid).
      if (prev && prev.uid !== item.uid && !prev.deleted) return { result: "stale", message: `SandboxSet ${item.namespace}/${item.name} was re-created` };
      if (team && !foreign) {
        const removed = await removeTemplate(this.#o.env, team.id, item.name);
        if (!removed.ok) return refused(removed.error);
      }
      this.#remember(item.namespace, item.name, { uid: item.uid, generation: prev?.generation ?? 0, deleted: true });
      return { result: "applied" };
    }
    if (prev && prev.uid === item.uid && (prev.deleted || item.generation < prev.generation)) {
      return { result: "stale", message: prev.deleted ? "SandboxSet was deleted" : `generation ${item.generation} is older than ${prev.generation}` };
    }
    if (foreign) return refused({ code: "conflict", message: `template ${item.name} of team ${item.namespace} runs on cluster ${foreign}; delete it there first` });
    const spec: TemplateSpec = { ...item.spec, cluster };
    const put = await putTemplate(this.#o.env, { teamName: item.namespace, templateId: item.name, public: false, spec, byCluster: true });
    if (!put.ok) return refused(put.error);
    // An unbind between the check above and the write: the binding's delete refuses while a
    // template is on the cluster (team-clusters.ts), so one that went first is seen here, and the
    // template it would have kept from the cluster goes again. The team is known by now: only
    // the binding is read again.
    if (!(await clusterStillServes(this.#o.env, cluster, put.template.teamId))) {
      if (!existing) await removeTemplate(this.#o.env, put.template.teamId, item.name);
      return refused(unboundRefusal(item.namespace, cluster, true));
    }
    this.#remember(item.namespace, item.name, { uid: item.uid, generation: item.generation, deleted: false });
    return { result: "applied" };
  }

  async #request(item: SandboxRequestItem): Promise<Omit<ReplyItem, "id">> {
    const stub = sandboxHandle(this.#o.env, item.sandboxId);
    const st = await stub.inspect();
    if (!st || st.phase === "Terminating") return this.#poolMemberRequest(item);
    if (st.spec.cluster !== this.#o.cluster()) return refused({ code: "forbidden", message: `sandbox ${item.sandboxId} runs on cluster ${st.spec.cluster}` });
    // A Sandbox in another namespace carrying this id is not this sandbox's: answered as if absent.
    if (item.namespace !== st.spec.teamName) return notFound(item.sandboxId);
    // A policy edit is not against a generation: the newest one the agent saw is what stands.
    if (item.action === "autoPause") {
      const probe = this.#o.env.PROBE.get(this.#o.env.PROBE.idFromName(item.sandboxId));
      // Without a policy: the Sandbox no longer has one the edge can run, so its probe stops. A
      // resync (the agent's first look since it started) stops only a probe a Sandbox started.
      if (!item.autoPausePolicy) await (item.resync ? probe.stopFrom("sandbox-object") : probe.stop());
      else await probe.start(item.sandboxId, st.spec.teamId, item.autoPausePolicy, "sandbox-object");
      return { result: "applied" };
    }
    // Hooks too: the newest the agent saw stands.
    if (item.action === "lifecycle") {
      if (item.resync && !st.spec.hooks) return { result: "applied" };
      const set = await stub.setHooks({ teamId: st.spec.teamId, admin: true }, item.lifecycle ?? {});
      return set.ok ? { result: "applied" } : refused(set.error);
    }
    if (item.generation < st.generation) return { result: "stale", message: `made at generation ${item.generation}, the edge is at ${st.generation}` };
    // As the sandbox's team, so the E2B API's rules (and refusals) apply unchanged. A pause is
    // answered once stored (wait 0): this request is the agent's own, which carries the pause out
    // and reports it through the Sandbox's status; holding its reply on its ack would stall the sync.
    const access = { teamId: st.spec.teamId, admin: false };
    const res =
      item.action === "pause"
        ? await stub.pause(access, undefined, 0)
        : item.action === "kill"
          ? await stub.kill(access)
          : await stub.connectSandbox(access, { timeoutS: DEFAULT_TIMEOUT_S });
    return res.ok ? { result: "applied" } : refused(res.error);
  }

  /**
   * A warm pool member has no row in a SandboxGroupDO: its pool owns it. Deleting it (kubectl delete sbx) is
   * reported to the pool as the member failing, so the pool drops it (unless a claim took it
   * first: then it is no longer the pool's) and replaces it; pausing one is refused.
   */
  async #poolMemberRequest(item: SandboxRequestItem): Promise<Omit<ReplyItem, "id">> {
    const d = this.#o.desired(item.sandboxId);
    if (!d || d.owner.kind !== "pool" || d.state === "deleted") return notFound(item.sandboxId);
    // The pool is `<teamId>/<template>`: a member is only its team's namespace's to report.
    const team = await findTeamByName(getDb(this.#o.env), item.namespace);
    if (!team || !d.owner.id.startsWith(`${team.id}/`)) return notFound(item.sandboxId);
    if (item.action !== "kill") return refused({ code: "conflict", message: `sandbox ${item.sandboxId} is an unclaimed member of pool ${d.owner.id}; its SandboxSet manages it` });
    const failed: Observation = {
      sandboxId: item.sandboxId,
      generation: d.generation,
      phase: "Failed",
      ready: false,
      endpoint: null,
      reason: "DeletedByUser",
      message: "the Sandbox object was deleted in the cluster",
      observedAt: Date.now(),
    };
    const pool = this.#o.env.POOL.get(this.#o.env.POOL.idFromName(d.owner.id));
    await pool.observeBatch([failed]);
    return { result: "applied" };
  }

  async #claim(item: ClaimItem): Promise<Omit<ReplyItem, "id">> {
    const env = this.#o.env;
    const db = getDb(env);
    // Sandboxes billed to the team: only a cluster bound to it may claim them.
    const may = await clusterMayServe(env, this.#o.cluster(), item.namespace);
    if (!may.ok) return refused(may.error);
    const team = may.team;
    if (!team) return refused({ code: "template_not_found", message: `Template "${item.templateName}" not found (no team ${item.namespace})` });
    // Its annotations are the sandboxes' metadata, and so their cluster objects' annotations: every
    // key must be one (the E2B route keeps other keys as metadata only).
    const invalid = annotationsProblem(item.annotations);
    if (invalid) return refused({ code: ErrorCode.badRequest, message: `SandboxClaim annotations: ${invalid}` });
    const caller: Caller = { keyId: `sandboxclaim:${item.claim.uid}`, teamId: team.id, teamName: team.name, admin: false };
    // Ids only: up to 1000 rows, whose metadata (128 KiB each at most) is not read.
    const held = await listSummaries(db, { teamId: team.id, states: ["running", "paused"], metadata: [[CLAIM_METADATA_KEY, item.claim.uid]], order: "asc", limit: 1000 });
    const ids = held.rows.map((r) => r.id as SandboxId);
    const missing = Math.min(CLAIM_BATCH, item.replicas - ids.length);
    // The claim's annotations and labels are user metadata, checked as an E2B create's would be;
    // its other settings are typed extensions, never metadata strings to parse back.
    const userMetadata: Record<string, string> = { ...item.annotations, [CLAIM_METADATA_KEY]: item.claim.uid };
    for (const [k, v] of Object.entries(item.labels)) userMetadata[`label:${k}`] = v;
    const ext = { ...parseCreateExtensions(userMetadata), createOnNoStock: item.createOnNoStock };
    if (item.inplaceUpdate?.image || item.inplaceUpdate?.cpuCount) ext.inplaceUpdate = checkInplaceUpdate(item.inplaceUpdate, "SandboxClaim inplaceUpdate");
    // Whole seconds within 1..600, as the E2B route's wait-ready extension takes them.
    if (item.waitReadyMs !== undefined) ext.waitReadyMs = Math.min(600, Math.max(1, Math.ceil(item.waitReadyMs / 1000))) * 1000;
    // The same bounds as an E2B create's body (env var count and sizes, timeout).
    const parsed = NewSandboxV2.safeParse({ templateID: item.templateName, envVars: item.envVars, metadata: userMetadata, timeout: item.timeoutS });
    if (!parsed.success) return refused({ code: ErrorCode.badRequest, message: `SandboxClaim: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}` });
    const body = parsed.data;
    const results = await Promise.all(Array.from({ length: Math.max(0, missing) }, () => createSandbox(env, caller, { version: "v2", body, ext })));
    let failure: Refusal | undefined;
    for (const r of results) {
      if (r.ok) ids.push(r.sandbox.sandboxId as SandboxId);
      else if (!failure || r.error.code === "template_not_found") failure = r.error;
    }
    if (ids.length >= item.replicas) return { result: "applied", sandboxIds: ids };
    return { ...refused(failure ?? { code: "sandbox_capacity_unavailable", message: `${ids.length} of ${item.replicas} claimed` }), sandboxIds: ids };
  }
}

function refused(e: { code: string; message: string }): Omit<ReplyItem, "id"> {
  return { result: "rejected", code: e.code, message: e.message };
}

function notFound(id: string): Omit<ReplyItem, "id"> {
  return refused({ code: "sandbox_not_found", message: `sandbox ${id} not found` });
}
