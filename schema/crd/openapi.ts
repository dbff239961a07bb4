// Building blocks for the CRDs' OpenAPI v3 schemas. Kubernetes requires structural schemas: every
// node has a type (or preserves unknown fields, or is an int-or-string), no $ref, and `properties`
// never sits next to `additionalProperties`.

export type Schema = Record<string, unknown>;

export const str = (extra: Schema = {}): Schema => ({ type: "string", ...extra });
export const bool = (extra: Schema = {}): Schema => ({ type: "boolean", ...extra });
export const int32 = (extra: Schema = {}): Schema => ({ type: "integer", format: "int32", ...extra });
export const int64 = (extra: Schema = {}): Schema => ({ type: "integer", format: "int64", ...extra });
export const time = (extra: Schema = {}): Schema => ({ type: "string", format: "date-time", ...extra });
export const arr = (items: Schema, extra: Schema = {}): Schema => ({ type: "array", items, ...extra });
export const enumOf = (values: string[], extra: Schema = {}): Schema => ({ type: "string", enum: values, ...extra });
export const stringMap = (extra: Schema = {}): Schema => ({ type: "object", additionalProperties: { type: "string" }, ...extra });
export const intOrString = (extra: Schema = {}): Schema => ({
  "x-kubernetes-int-or-string": true,
  anyOf: [{ type: "integer" }, { type: "string" }],
  ...extra,
});
/** Free-form object (kept verbatim, e.g. a pod template or a raw strategic merge patch). */
export const free = (extra: Schema = {}): Schema => ({ type: "object", "x-kubernetes-preserve-unknown-fields": true, ...extra });

export function obj(properties: Record<string, Schema>, extra: Schema = {}): Schema {
  return { type: "object", properties, ...extra };
}

/** An IntOrString that is an absolute count (≥ 0) or a percentage like `20%`. */
export const countOrPercent = (extra: Schema = {}): Schema =>
  intOrString({
    "x-kubernetes-validations": [
      { rule: "type(self) == int ? self >= 0 : self.matches('^[0-9]{1,3}%$')", message: "must be a non-negative integer or a percentage like 20%" },
    ],
    ...extra,
  });

/** metav1.Condition, as a list map keyed by type. */
export const conditions = arr(
  obj(
    {
      type: str({ maxLength: 316 }),
      status: enumOf(["True", "False", "Unknown"]),
      reason: str({ maxLength: 1024 }),
      message: str({ maxLength: 32768 }),
      lastTransitionTime: time(),
      observedGeneration: int64({ minimum: 0 }),
    },
    { required: ["type", "status", "lastTransitionTime"] },
  ),
  { "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"] },
);

export const labelSelector = obj({
  matchLabels: stringMap(),
  matchExpressions: arr(
    obj(
      { key: str(), operator: enumOf(["In", "NotIn", "Exists", "DoesNotExist"]), values: arr(str()) },
      { required: ["key", "operator"] },
    ),
  ),
});

/** A PodTemplateSpec. Kept free-form so any pod field applies unchanged, but a template must name
 * at least one container with an image. */
export const podTemplate = free({
  properties: {
    metadata: free(),
    spec: free({
      properties: {
        containers: arr(free({ properties: { name: str({ minLength: 1 }), image: str() }, required: ["name"] }), { minItems: 1 }),
      },
      required: ["containers"],
    }),
  },
  required: ["spec"],
});

/** A PersistentVolumeClaim template (metadata.name names the volume it backs). */
export const volumeClaimTemplate = free({
  properties: { metadata: free({ properties: { name: str({ minLength: 1 }) }, required: ["name"] }), spec: free() },
  required: ["metadata"],
});

export const templateRef = obj({ name: str({ minLength: 1 }), kind: str(), apiVersion: str() }, { required: ["name"] });

export const runtimes = arr(obj({ name: enumOf(["agent-runtime", "csi", "traffic-proxy"]) }, { required: ["name"] }));
export const pauseStrategy = obj({ type: enumOf(["Stop", "Hibernate", "Freeze"], { default: "Stop" }) });
export const persistentContents = arr(enumOf(["ip", "memory", "filesystem"]));

export interface PrinterColumn {
  name: string;
  type: "string" | "integer" | "date" | "boolean" | "number";
  jsonPath: string;
  priority?: number;
  description?: string;
}

export interface CrdInput {
  kind: string;
  plural: string;
  shortNames: string[];
  scope?: "Namespaced" | "Cluster";
  spec: Schema;
  status?: Schema;
  columns: PrinterColumn[];
  scale?: { specReplicasPath: string; statusReplicasPath: string; labelSelectorPath?: string };
  /** CEL rules on the whole spec. */
  specRules?: { rule: string; message: string }[];
  categories?: string[];
}

const AGE: PrinterColumn = { name: "AGE", type: "date", jsonPath: ".metadata.creationTimestamp" };

/** One CustomResourceDefinition object for `agents.kruise.io/v1alpha1`. */
export function crd(input: CrdInput): Schema {
  const spec = input.specRules ? { ...input.spec, "x-kubernetes-validations": input.specRules } : input.spec;
  const properties: Record<string, Schema> = { apiVersion: str(), kind: str(), metadata: { type: "object" }, spec };
  if (input.status) properties.status = input.status;
  const subresources: Schema = {};
  if (input.status) subresources.status = {};
  if (input.scale) subresources.scale = input.scale;
  const columns = input.columns.some((c) => c.name === "AGE") ? input.columns : [...input.columns, AGE];
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${input.plural}.agents.kruise.io` },
    spec: {
      group: "agents.kruise.io",
      names: {
        kind: input.kind,
        listKind: `${input.kind}List`,
        plural: input.plural,
        singular: input.kind.toLowerCase(),
        shortNames: input.shortNames,
        categories: input.categories ?? ["kruise-agents"],
      },
      scope: input.scope ?? "Namespaced",
      versions: [
        {
          name: "v1alpha1",
          served: true,
          storage: true,
          schema: { openAPIV3Schema: { type: "object", properties, required: ["spec"] } },
          subresources,
          additionalPrinterColumns: columns,
        },
      ],
    },
  };
}


