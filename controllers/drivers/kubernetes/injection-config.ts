// The injection config in force, read through an informer on the ConfigMaps of the agent's
// namespace (no API request per pod): the system ConfigMap (`sandbox-injection-config`) over the
// built-in agent-runtime, and the user's (`sandbox-injection-config-user`) replacing components
// by name. A ConfigMap that does not parse is refused: a Warning Event `InvalidInjectionConfig`
// on that ConfigMap and a log line, `condition` says so, and the last good config of that
// ConfigMap stays in force until a valid one arrives (then a Normal `InjectionConfigApplied`).
// The agent has no object of its own to carry a condition; `condition` is for its health report.
// Only pods built later see a change: existing pods are never patched.
import type { CoreV1Api, KubeConfig, V1ConfigMap } from "@kubernetes/client-node";
import { EventReason } from "../../../schema/crd/conditions.ts";
import { mergeInjection, parseInjectionConfig, SYSTEM_INJECTION_CONFIGMAP, USER_INJECTION_CONFIGMAP, type InjectionConfig } from "../../../schema/crd/injection.ts";
import { postEvent } from "./kube-api.ts";
import { ObjectCache } from "./object-cache.ts";

const OURS = new Set([SYSTEM_INJECTION_CONFIGMAP, USER_INJECTION_CONFIGMAP]);

/** Keeps the data of our two ConfigMaps only (a namespace's others are metadata). */
function slimConfigMap(raw: V1ConfigMap): V1ConfigMap {
  const m = raw.metadata ?? {};
  const metadata = { name: m.name, namespace: m.namespace, uid: m.uid, resourceVersion: m.resourceVersion, labels: m.labels };
  return OURS.has(m.name ?? "") ? { metadata, data: raw.data ?? {} } : { metadata };
}

export interface InjectionCondition {
  type: "InjectionConfigValid";
  status: "True" | "False";
  reason: string;
  message: string;
}

export class InjectionConfigSource {
  readonly #core: CoreV1Api;
  readonly #namespace: string;
  readonly #log: (msg: string) => void;
  readonly #count: () => void;
  readonly #cache: ObjectCache<V1ConfigMap>;
  /** Last good config of each ConfigMap (empty while absent). */
  readonly #good = new Map<string, InjectionConfig>();
  /** The resourceVersion last refused per ConfigMap, so each bad version is reported once. */
  readonly #refused = new Map<string, string>();
  #current: InjectionConfig = mergeInjection({}, {});
  condition: InjectionCondition = { type: "InjectionConfigValid", status: "True", reason: "Valid", message: "" };

  constructor(deps: { kubeConfig: KubeConfig; core: CoreV1Api; namespace: string; log: (msg: string) => void; count: () => void }) {
    this.#core = deps.core;
    this.#namespace = deps.namespace;
    this.#log = deps.log;
    this.#count = deps.count;
    const ns = deps.namespace;
    this.#cache = new ObjectCache<V1ConfigMap>(deps.kubeConfig, {
      path: `/api/v1/namespaces/${ns}/configmaps`,
      list: () => deps.core.listNamespacedConfigMap({ namespace: ns }),
      slim: slimConfigMap,
      onError: (err) => deps.log(`watch ${ns} configmaps: ${(err as Error)?.message ?? err}`),
    });
    this.#cache.onChange((cm, verb) => {
      const name = cm.metadata?.name ?? "";
      if (OURS.has(name)) void this.#read(name, verb === "delete" ? undefined : cm);
    });
  }

  /** The components in force now (merged; a new object only when a ConfigMap changed). */
  current(): InjectionConfig {
    return this.#current;
  }

  /** Resolves after the first list (a namespace without our ConfigMaps: the built-in config). */
  async start(): Promise<void> {
    await this.#cache.start();
  }

  async stop(): Promise<void> {
    await this.#cache.stop();
  }

  async #read(name: string, cm: V1ConfigMap | undefined): Promise<void> {
    const parsed = cm ? parseInjectionConfig(cm.data) : ({ ok: true, config: {} } as const);
    if (parsed.ok) {
      this.#good.set(name, parsed.config);
      this.#current = mergeInjection(this.#good.get(SYSTEM_INJECTION_CONFIGMAP) ?? {}, this.#good.get(USER_INJECTION_CONFIGMAP) ?? {});
      const wasRefused = this.#refused.delete(name);
      if (![...this.#refused.keys()].length) this.condition = { type: "InjectionConfigValid", status: "True", reason: "Valid", message: "" };
      if (wasRefused && cm) await this.#event(cm, "Normal", EventReason.InjectionConfigApplied, "injection config accepted");
      return;
    }
    const rv = cm!.metadata?.resourceVersion ?? "";
    if (this.#refused.get(name) === rv) return;
    this.#refused.set(name, rv);
    const message = `${name} refused, the last good config stays in force: ${parsed.message}`;
    this.condition = { type: "InjectionConfigValid", status: "False", reason: "InvalidInjectionConfig", message };
    this.#log(`injection config ${this.#namespace}/${message}`);
    await this.#event(cm!, "Warning", EventReason.InvalidInjectionConfig, message);
  }

  async #event(cm: V1ConfigMap, type: "Normal" | "Warning", reason: string, message: string): Promise<void> {
    this.#count();
    const about = { apiVersion: "v1", kind: "ConfigMap", name: cm.metadata!.name!, namespace: this.#namespace, uid: cm.metadata?.uid };
    await postEvent(this.#core, about, type, reason, message.slice(0, 1024), new Date(), this.#log);
  }
}
