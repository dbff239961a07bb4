// Team quota sync, cluster → edge: the quota annotations of a synced namespace's Namespace object
// (namespace-quota.ts) go to the edge as `quotas` items; the edge checks that this cluster serves
// the team and applies them through the admin API's operation. Level-based: the Namespace is read
// every `pollMs` (a GET by name, which a RoleBinding in the namespace allows; a watch of one
// Namespace needs cluster-wide list/watch of namespaces), and whatever differs from what the edge
// last accepted is sent again, so a refused or unanswered push is retried. Invalid annotations
// and the edge's refusals are reported once per value as Warning Events on the Namespace, and
// change nothing.
import { CoreV1Api, type KubeConfig } from "@kubernetes/client-node";
import type { Link } from "../link.ts";
import { postEvent } from "../../drivers/kubernetes/kube-api.ts";
import { quotaAnnotationsOf, quotaFromAnnotations } from "./namespace-quota.ts";

export interface NamespaceQuotaSyncOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  link: Pick<Link, "call">;
  pollMs?: number;
  log?: (msg: string) => void;
}

export class NamespaceQuotaSync {
  readonly #o: NamespaceQuotaSyncOptions;
  readonly #core: CoreV1Api;
  /** The quota annotations the edge last accepted (JSON); undefined until the first push. */
  #applied: string | undefined;
  /** The annotations last reported in an Event, so each refused value is reported once. */
  #reported: string | undefined;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #running: Promise<void> | undefined;

  constructor(opts: NamespaceQuotaSyncOptions) {
    this.#o = opts;
    this.#core = opts.kubeConfig.makeApiClient(CoreV1Api);
  }

  start(): void {
    this.#tick();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
  }

  #tick(): void {
    if (this.#stopped) return;
    this.#running = this.sync()
      .catch((err) => this.#o.log?.(`namespace ${this.#o.namespace} quota: ${(err as Error).message}`))
      .finally(() => {
        if (!this.#stopped) this.#timer = setTimeout(() => this.#tick(), this.#o.pollMs ?? 10_000);
      });
  }

  /** One pass: reads the Namespace and pushes its quota if it changed since the edge accepted one. */
  async sync(): Promise<void> {
    const ns = await this.#core.readNamespace({ name: this.#o.namespace });
    const annotations = quotaAnnotationsOf(ns.metadata?.annotations);
    const key = JSON.stringify(annotations);
    if (key === this.#applied) return;
    const quota = quotaFromAnnotations(annotations);
    if (!quota.ok) return this.#warn(key, "InvalidSandboxQuota", quota.message);
    const reply = await this.#o.link.call({ type: "quotas", item: { namespace: this.#o.namespace, limits: quota.limits } });
    if (reply.result === "rejected") return this.#warn(key, "SandboxQuotaRefused", `the edge refused the quota: ${reply.code}: ${reply.message}`);
    this.#applied = key;
    this.#reported = undefined;
  }

  async #warn(key: string, reason: string, message: string): Promise<void> {
    if (this.#reported === key) return;
    this.#reported = key;
    this.#o.log?.(`namespace ${this.#o.namespace}: ${message}`);
    const about = { apiVersion: "v1", kind: "Namespace", name: this.#o.namespace, namespace: this.#o.namespace };
    await postEvent(this.#core, about, "Warning", reason, message.slice(0, 1024), new Date(), this.#o.log ?? (() => {}));
  }
}
