// A SandboxClaim's dynamic CSI mounts (`spec.dynamicVolumesMount`, OpenKruise Agents §1.4;
// upstream's `CSIMountConfig`), kept on the claimed Sandbox as the JSON annotation
// `e2b.agents.kruise.io/csi-volume-config` so they are made again after every resume. Tenant data:
// bounded and checked before anything reaches a PV lookup or the runtime.
import { z } from "zod";
import { isReservedKey } from "./user-metadata.ts";

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;

/** An absolute path without `.`/`..` components, doubled or trailing slashes (the mount point). */
export function isCleanAbsolutePath(p: string): boolean {
  return p.startsWith("/") && p !== "/" && !p.endsWith("/") && p.split("/").slice(1).every((part) => part !== "" && part !== "." && part !== "..") && !p.includes("\0");
}

/** A relative path inside the volume, never climbing out of it. */
export function isCleanRelativePath(p: string): boolean {
  return !p.startsWith("/") && p.split("/").every((part) => part !== "" && part !== "." && part !== "..") && !p.includes("\0");
}

export const CsiMountConfig = z.strictObject({
  mountID: z.string().max(63).optional(),
  pvName: z.string().regex(DNS_SUBDOMAIN, "must be a PersistentVolume name (DNS subdomain)"),
  mountPath: z.string().max(1024).refine(isCleanAbsolutePath, "must be an absolute clean path (no '.', '..', '//', trailing '/'; not '/')"),
  subPath: z.string().max(1024).refine(isCleanRelativePath, "must be a relative path inside the volume (no '..', no leading '/')").optional(),
  readOnly: z.boolean().optional(),
  /** Override the PV's `spec.csi.volumeAttributes` for this mount only. Not the platform's own
   * keys (`*.agents.kruise.io/`: the sub-path and the publish Secret the runtime sets), which would
   * pass `subPath`'s checks or name another namespace's Secret. */
  attributes: z
    .record(z.string().min(1).max(253), z.string().max(4096))
    .refine((a) => Object.keys(a).length <= 64, "at most 64 attributes")
    .refine((a) => !Object.keys(a).some(isReservedKey), "a key uses a reserved prefix (agents.kruise.io: the platform's own volume_context keys)")
    .optional(),
});
export type CsiMountConfig = z.infer<typeof CsiMountConfig>;

export const CsiMounts = z
  .array(CsiMountConfig)
  .max(16, "at most 16 mounts")
  .refine((ms) => new Set(ms.map((m) => m.mountPath)).size === ms.length, "two mounts share a mountPath");

/** The mounts, or why they cannot be made (`where` names the field in the message). */
export function csiMountsProblem(mounts: unknown, where: string): string | undefined {
  const r = CsiMounts.safeParse(mounts);
  if (r.success) return undefined;
  const issue = r.error.issues[0]!;
  return `${[where, ...issue.path].join(".").replace(/\.(\d+)/g, "[$1]")}: ${issue.message}`;
}

/** The annotation's mounts; an annotation that does not parse counts as none (the driver wrote it). */
export function parseCsiAnnotation(json: string | undefined): CsiMountConfig[] {
  if (!json) return [];
  try {
    const r = CsiMounts.safeParse(JSON.parse(json));
    return r.success ? r.data : [];
  } catch {
    return [];
  }
}
