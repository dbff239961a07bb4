// What the driver's parts share: the API clients, the request counter, the clock and log, and
// where a sandbox's objects are (its namespace scope and the informers' copies of its Sandbox and
// Pod). The facade (kubernetes-driver.ts) makes one and hands it to each part.
import type { CoreV1Api, CustomObjectsApi, V1OwnerReference, V1Pod } from "@kubernetes/client-node";
import { API_VERSION } from "../../../schema/crd/labels.ts";
import type { NamespaceScope } from "./namespace-scope.ts";
import type { SandboxObject } from "./objects.ts";

export interface DriverContext {
  readonly core: CoreV1Api;
  readonly custom: CustomObjectsApi;
  /** A merge patch of the object at `path`, its answer as plain JSON (kube-api.ts `patchJson`);
   * not counted (the caller counts, as with the clients). */
  patchJson(path: string, body: object): Promise<unknown>;
  /** Counts `n` API requests (the driver's `requests`). */
  count(n?: number): void;
  now(): number;
  log(msg: string): void;
  /** The scope holding a sandbox's objects (the home scope for one not seen anywhere). */
  scopeOf(id: string): NamespaceScope;
  sandbox(id: string): SandboxObject | undefined;
  /** The sandbox's live pod, else a terminating one. */
  pod(id: string): V1Pod | undefined;
}

export function ownerRef(sbx: SandboxObject): V1OwnerReference {
  return { apiVersion: API_VERSION, kind: "Sandbox", name: sbx.metadata!.name!, uid: sbx.metadata!.uid!, controller: true, blockOwnerDeletion: true };
}
