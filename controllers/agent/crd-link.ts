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
  log?: (msg: string) => void;
  retryMs?: number;
}

export interface CrdLink {
  sets: SandboxSetSync;
  claims: SandboxClaimSync;
  /** The driver's `onRequest`: forwards a kubectl edit to the edge (retried until answered). */
  request(req: SandboxRequest): void;
  stop(): Promise<void>;
}

export async function startCrdLink(o: CrdLinkOptions): Promise<CrdLink> {
  const log = o.log ?? (() => {});
  const retryMs = o.retryMs ?? 1000;
  const sets = new SandboxSetSync({ sandboxSets: o.driver.sandboxSets, namespace: o.namespace, cluster: o.cluster, sink: new LinkPoolSink(o.link), log, retryMs });
  const claims = new SandboxClaimSync({ kubeConfig: o.kubeConfig, namespace: o.namespace, claimer: new LinkClaimer(o.link), log, retryMs });
  await claims.start();
  sets.start();

  const timers = new Set<NodeJS.Timeout>();
  let stopped = false;
  const send = async (req: SandboxRequest): Promise<void> => {
    // The edge compares the generation the Sandbox object showed (the edge generation the driver
    // last wrote it for), not metadata.generation, with its own.
    const generation = (await o.driver.observe(req.sandboxId))?.generation ?? 0;
    const reply = await o.link.call({ type: "requests", item: { sandboxId: req.sandboxId as never, action: req.action, generation } });
    if (reply.result !== "applied") log(`kubectl ${req.action} of ${req.sandboxId}: ${reply.result}${reply.code ? ` ${reply.code}` : ""}${reply.message ? `: ${reply.message}` : ""}`);
  };
  const request = (req: SandboxRequest): void => {
    if (stopped) return;
    send(req).catch((err) => {
      // Not connected, or the session dropped before the answer: the edit still stands, so try again.
      log(`kubectl ${req.action} of ${req.sandboxId}: ${(err as Error).message}; retrying`);
      const t = setTimeout(() => {
        timers.delete(t);
        request(req);
      }, retryMs);
      timers.add(t);
    });
  };

  return {
    sets,
    claims,
    request,
    async stop() {
      stopped = true;
      for (const t of timers) clearTimeout(t);
      sets.stop();
      await claims.stop();
    },
  };
}
