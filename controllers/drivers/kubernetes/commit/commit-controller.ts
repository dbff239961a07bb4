// The Commit controller's shell (on custom-controller.ts: an informer on the namespace's Commits
// and a work queue, one pass per Commit at a time). A pass reads the target pod, the commit Job and its pod (GETs: a
// Commit is rare, so no informer on every Job and pod), asks `decideCommit`, and applies the
// answer: create the Job, write the status, post the Event, delete after the ttl. Level-based: a
// restarted agent finds the Job by name and carries on; nothing is created twice.
import { BatchV1Api, type KubeConfig, type V1Job, type V1Pod } from "@kubernetes/client-node";
import { GROUP, LABEL, VERSION } from "../../../../schema/crd/labels.ts";
import { apiMessage, mergePatch, postEvent, statusCode, tolerate } from "../kube-api.ts";
import { CustomObjectController } from "../custom-controller.ts";
import type { ObjectCache } from "../object-cache.ts";
import { COMMIT_CONTAINER, COMMIT_UID_LABEL, commitJob, commitJobName, type CommitJobOptions } from "./job-spec.ts";
import { decideCommit, jobCreated, jobRefused, type CommitDecision, type CommitExit, type CommitJob, type CommitSpec, type CommitStatus, type TargetPod } from "./machine.ts";
import type { KubernetesObject } from "@kubernetes/client-node";

export interface CommitObject extends KubernetesObject {
  spec: CommitSpec;
  status?: CommitStatus;
}

export interface CommitControllerOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  /** The `Commit` feature gate: off, Commits only get a status saying so. */
  enabled: boolean;
  job: CommitJobOptions;
  /** The images the platform runs in sandbox pods (the driver's platformImages): a Commit may
   * not push to their repositories. The commit Job's own image is added here. */
  platformImages?: () => string[];
  now?: () => number;
  log?: (msg: string) => void;
}

const PLURAL = "commits";

export class CommitController extends CustomObjectController<CommitObject> {
  readonly #o: CommitControllerOptions;
  readonly #batch: BatchV1Api;
  readonly #now: () => number;

  constructor(o: CommitControllerOptions) {
    super({ kubeConfig: o.kubeConfig, namespace: o.namespace, plural: PLURAL, queue: "commit", log: o.log });
    this.#o = o;
    this.#now = o.now ?? Date.now;
    this.#batch = o.kubeConfig.makeApiClient(BatchV1Api);
  }

  get commits(): ObjectCache<CommitObject> {
    return this.objects;
  }

  /** One pass; answers when to look again (undefined: when the Commit changes). */
  async reconcile(name: string): Promise<number | undefined> {
    const c = this.commits.get(name);
    if (!c || c.metadata?.deletionTimestamp) return undefined;
    const ns = this.#o.namespace;
    const platformImages = [this.#o.job.image, ...(this.#o.platformImages?.() ?? [])];
    const base = { name, generation: c.metadata?.generation ?? 1, spec: c.spec, status: c.status ?? {}, gate: this.#o.enabled, now: this.#now(), platformImages };
    const terminal = base.status.phase === "Succeeded" || base.status.phase === "Failed";
    const job = terminal || !this.#o.enabled ? null : await this.#job(c);
    const pod = job || terminal || !this.#o.enabled ? null : await this.#targetPod(c.spec.podName);
    const exit = job && (job.complete || job.failed) ? await this.#exit(c.metadata!.uid!) : null;
    let d = decideCommit({ ...base, pod, job, exit });
    if (d.createJob) d = await this.#createJob(c, base, d.createJob);
    if (d.status) this.commits.remember(await this.custom.patchNamespacedCustomObjectStatus({ group: GROUP, version: VERSION, namespace: ns, plural: PLURAL, name, body: { status: d.status } }, mergePatch));
    if (d.event) await postEvent(this.core, { apiVersion: `${GROUP}/${VERSION}`, kind: "Commit", name, namespace: ns, uid: c.metadata!.uid }, d.event.type, d.event.reason, d.event.message, new Date(base.now), this.#o.log ?? (() => {}));
    if (d.delete) {
      // Background propagation: the Job (owned by the Commit) and its pod go with it.
      await tolerate(this.#batch.deleteNamespacedJob({ name: commitJobName(name), namespace: ns, propagationPolicy: "Background" }), [404]);
      await tolerate(this.custom.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: ns, plural: PLURAL, name }), [404]);
    }
    return d.requeueAfterMs;
  }

  async #createJob(c: CommitObject, base: Parameters<typeof jobCreated>[0], target: NonNullable<CommitDecision["createJob"]>): Promise<CommitDecision> {
    const body = commitJob(this.#o.job, { name: c.metadata!.name!, namespace: this.#o.namespace, uid: c.metadata!.uid!, spec: c.spec }, target);
    try {
      await this.#batch.createNamespacedJob({ namespace: this.#o.namespace, body });
    } catch (err) {
      // Ours from a pass whose status write was lost: carry on with it.
      if (statusCode(err) !== 409) return jobRefused(base, apiMessage(err));
    }
    return jobCreated(base, body.metadata!.name!, target.nodeName);
  }

  async #targetPod(name: string): Promise<TargetPod | null> {
    const pod = await tolerate(this.core.readNamespacedPod({ name, namespace: this.#o.namespace }), [404]);
    if (!pod) return null;
    const started = Object.fromEntries((pod.status?.containerStatuses ?? []).map((s) => [s.name, s.state?.running || s.state?.terminated ? s.containerID : undefined]));
    return { nodeName: pod.spec?.nodeName, containers: (pod.spec?.containers ?? []).map((x) => x.name), containerIds: started, sandbox: pod.metadata?.labels?.[LABEL.createdBy] === "sandbox" };
  }

  /** The Commit's Job, if it exists and is this Commit's (a same-named Job of someone else is not). */
  async #job(c: CommitObject): Promise<CommitJob | null> {
    const job: V1Job | undefined = await tolerate(this.#batch.readNamespacedJob({ name: commitJobName(c.metadata!.name!), namespace: this.#o.namespace }), [404]);
    if (!job || job.metadata?.labels?.[COMMIT_UID_LABEL] !== c.metadata!.uid) return null;
    const cond = (type: string) => job.status?.conditions?.find((x) => x.type === type && x.status === "True");
    const failed = cond("Failed");
    const done = cond("Complete") ?? failed;
    return {
      complete: !!cond("Complete"),
      ...(failed ? { failed: { reason: failed.reason, message: failed.message } } : {}),
      ...(done?.lastTransitionTime ? { finishedAt: new Date(done.lastTransitionTime).getTime() } : {}),
    };
  }

  /** The commit container's end, from the Job's pod; null when no pod shows it. */
  async #exit(uid: string): Promise<CommitExit | null> {
    const pods: V1Pod[] = (await this.core.listNamespacedPod({ namespace: this.#o.namespace, labelSelector: `${COMMIT_UID_LABEL}=${uid}` })).items;
    for (const p of pods) {
      const t = p.status?.containerStatuses?.find((s) => s.name === COMMIT_CONTAINER)?.state?.terminated;
      if (t) return { exitCode: t.exitCode, message: t.message ?? "" };
    }
    return null;
  }
}
