// A small YAML writer for JSON data (the CRD manifests). Strings that YAML could read as anything
// else are written double-quoted, which is JSON string syntax and valid YAML.

const PLAIN = /^[A-Za-z_./][A-Za-z0-9_./ -]*$/;
const KEYWORDS = /^(true|false|yes|no|on|off|null|y|n|~)$/i;

function scalar(v: unknown): string {
  if (typeof v === "string") return PLAIN.test(v) && !KEYWORDS.test(v) && !v.endsWith(" ") ? v : JSON.stringify(v);
  if (v === null || v === undefined) return "null";
  return String(v);
}

function isEmpty(v: unknown): boolean {
  return typeof v === "object" && v !== null && Object.keys(v).length === 0;
}

function lines(v: unknown, indent: string): string[] {
  if (Array.isArray(v)) {
    return v.flatMap((item) => {
      if (typeof item !== "object" || item === null || isEmpty(item)) return [`${indent}- ${isEmpty(item) ? (Array.isArray(item) ? "[]" : "{}") : scalar(item)}`];
      const inner = lines(item, `${indent}  `);
      return [`${indent}- ${inner[0]!.trimStart()}`, ...inner.slice(1)];
    });
  }
  return Object.entries(v as Record<string, unknown>).flatMap(([k, val]) => {
    const key = scalar(k);
    if (typeof val !== "object" || val === null) return [`${indent}${key}: ${scalar(val)}`];
    if (isEmpty(val)) return [`${indent}${key}: ${Array.isArray(val) ? "[]" : "{}"}`];
    return [`${indent}${key}:`, ...lines(val, `${indent}  `)];
  });
}

/** One YAML document for a JSON-compatible object. */
export function toYaml(v: Record<string, unknown>): string {
  return lines(v, "").join("\n") + "\n";
}
