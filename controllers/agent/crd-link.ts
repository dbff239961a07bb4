// The cluster's custom resources over the agent's session (`--driver kubernetes`): SandboxSets and
// SandboxClaims of the namespace go to the edge as `sandboxsets`/`claims` items, and kubectl edits
// of a Sandbox (spec.paused, delete) as `requests`. The edge decides; the driver acts only on the
// intents that follow. Everything is level-based and retried until the edge answers.
import type { KubeConfig } from "@kubernetes/client-node";
import type { KubernetesDriver, SandboxRequest } from "../drivers/kubernetes/kubernetes-driver.ts";
import { LinkClaimer, SandboxClaimSync } from "../drivers/kubernetes/sandboxclaim-sync.ts";
import { LinkPoolSink, SandboxSetSync } from "../drivers/kubernetes/sandboxset-sync.ts";
import type { Link } from "./link.ts";

export interface CrdLinkOptions {
  link: Link;
  driver: KubernetesDriver;
  kubeConfig: KubeConfig;
  /** The namespace the driver serves; its name is the team's on the edge. */
  namespace: string;
  cluster: string;
  /** The forwarder the driver was built with (edits it reported before the link existed wait there). */
  requests?: KubectlRequests;
  log?: (msg: string) => void;
  retryMs?: number;
}

export interface CrdLink {
  sets: SandboxSetSync;
  claims: SandboxClaimSync;
  requests: KubectlRequests;
  stop(): Promise<void>;
}

/**
 * The driver's `onRequest`, from the moment the driver exists: kubectl edits the driver reports
 * before the link is up (made while the agent was down, found by its first list) wait here; each
 * is sent as a `requests` item, retried until the edge answers.
 */
export class KubectlRequests {
  #driver: Pick<KubernetesDriver, "observe"> | undefined;
  #link: Pick<Link, "call"> | undefined;
  #log: (msg: string) => void = () => {};
  #retryMs = 1000;
  #stopped = false;
  readonly #waiting: { req: SandboxRequest; generation: Promise<number> | undefined }[] = [];
  readonly #timers = new Set<NodeJS.Timeout>();

  /** The driver whose Sandboxes are edited (as soon as it is constructed). */
  bind(driver: Pick<KubernetesDriver, "observe">): void {
    this.#driver = driver;
  }

  readonly onRequest = (req: SandboxRequest): void => {
    if (this.#stopped) return;
    // The edge compares the edge generation the Sandbox showed when it was edited with its own,
    // so it is read now: a newer intent may rewrite the object before the link can send this.
    const generation = this.#driver ? this.#generation(this.#driver, req.sandboxId) : undefined;
    if (this.#link) this.#send(req, generation);
    else this.#waiting.push({ req, generation });
  };

  attach(link: Pick<Link, "call">, log: (msg: string) => void, retryMs: number): void {
    this.#link = link;
    this.#log = log;
    this.#retryMs = retryMs;
    for (const w of this.#waiting.splice(0)) this.#send(w.req, w.generation);
  }

  stop(): void {
    this.#stopped = true;
    for (const t of this.#timers) clearTimeout(t);
  }

  #generation(driver: Pick<KubernetesDriver, "observe">, id: string): Promise<number> {
    return driver.observe(id).then((o) => o?.generation ?? 0);
  }

  /** `generation` undefined: the edit came before bind() (read at send time, the best left). */
  #send(req: SandboxRequest, known: Promise<number> | undefined): void {
    if (this.#stopped) return;
    const generation = known ?? this.#generation(this.#driver!, req.sandboxId);
    const what = `kubectl ${req.action} of ${req.sandboxId}`;
    generation
      .then((g) => this.#link!.call({ type: "requests", item: { sandboxId: req.sandboxId as never, action: req.action, generation: g } }))
      .then((reply) => {
        if (reply.result !== "applied") this.#log(`${what}: ${reply.result}${reply.code ? ` ${reply.code}` : ""}${reply.message ? `: ${reply.message}` : ""}`);
      })
      .catch((err) => {
        if (this.#stopped) return;
        // Not connected, or the session dropped before the answer: the edit still stands.
        this.#log(`${what}: ${(err as Error).message}; retrying`);
        const t = setTimeout(() => {
          this.#timers.delete(t);
          this.#send(req, generation);
        }, this.#retryMs);
        this.#timers.add(t);
      });
  }
}

export async function startCrdLink(o: CrdLinkOptions): Promise<CrdLink> {
  const log = o.log ?? (() => {});
  const retryMs = o.retryMs ?? 1000;
  const sets = new SandboxSetSync({ sandboxSets: o.driver.sandboxSets, namespace: o.namespace, cluster: o.cluster, sink: new LinkPoolSink(o.link), log, retryMs });
  const claims = new SandboxClaimSync({ kubeConfig: o.kubeConfig, namespace: o.namespace, claimer: new LinkClaimer(o.link), log, retryMs });
  await claims.start();
  sets.start();
  const requests = o.requests ?? new KubectlRequests();
  requests.bind(o.driver);
  requests.attach(o.link, log, retryMs);
  return {
    sets,
    claims,
    requests,
    async stop() {
      requests.stop();
      sets.stop();
      await claims.stop();
    },
  };
}
