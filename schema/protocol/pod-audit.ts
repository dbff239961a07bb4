import { z } from "zod";

/**
 * A pod traffic-proxy's L7 audit records, collected by its agent (issue 14): the sidecar keeps the
 * records of the requests it inspected (controllers/traffic/audit-buffer.ts) and hands them over
 * (a batch again until a pull acknowledges it) at POD_AUDIT_PATH of its health port to a request
 * carrying the pod's pull token (`audit.token` of the pod's Secret, which only the agent and the
 * sidecar have); the agent pulls over a connection it opens to the pod (nothing in the pod connects out for it), checks them with these schemas and
 * keeps them as the sandbox's network audit, the local driver's records' home
 * (controllers/drivers/kubernetes/pod-audit.ts). Hosts and paths are what the tenant's code asked
 * for: data, bounded here, and never trusted for whose they are — the agent names the sandbox by the
 * pod it pulled from, whatever a record says.
 */
export const POD_AUDIT_PATH = "/audit";
/** The request header by which a pull acknowledges the last batch the agent kept (its `batch`). */
export const AUDIT_ACK_HEADER = "x-audit-ack";
/** The Secret key (and the file in the sidecar's mount) holding the pull token. */
export const AUDIT_TOKEN_FILE = "audit.token";
/** Records a sidecar keeps until pulled (more are counted in `dropped`), and a pull's limit. */
export const MAX_POD_AUDIT_RECORDS = 512;
/** The largest answer the agent reads (more: the pull is abandoned, nothing kept). The bounds below
 * are in characters, and a record of tenant-chosen characters can encode to ~11 KB (6 bytes a
 * control character, JSON-escaped), so a full buffer need not fit: the sidecar hands over only what
 * fits this and keeps the rest for the next pull (audit-buffer.ts `take`). */
export const MAX_POD_AUDIT_BYTES = 1024 * 1024;
export const MAX_AUDIT_HOST = 253;
export const MAX_AUDIT_PATH = 1024;
export const MAX_AUDIT_RULE = 256;
export const MAX_AUDIT_TOOL = 256;

const bytes = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);

export const PodAuditRecordSchema = z.strictObject({
  /** What the sidecar says it is about: ignored (the agent sets it). */
  sandbox: z.string().max(64).optional(),
  host: z.string().max(MAX_AUDIT_HOST),
  method: z.string().regex(/^[A-Za-z-]{1,20}$/),
  path: z.string().max(MAX_AUDIT_PATH),
  rule: z.string().max(MAX_AUDIT_RULE),
  status: z.number().int().min(0).max(999),
  bytesOut: bytes,
  bytesIn: bytes,
  tool: z.string().max(MAX_AUDIT_TOOL).optional(),
  refused: z.boolean(),
});

export const PodAuditBatchSchema = z.strictObject({
  records: z.array(PodAuditRecordSchema).max(MAX_POD_AUDIT_RECORDS),
  /** Records the sidecar did not keep (its buffer was full between two pulls). */
  dropped: z.number().int().nonnegative(),
  /** This batch's id: the sidecar hands the same batch again until a pull acknowledges it
   * (AUDIT_ACK_HEADER), so an answer lost on the way (a timeout, a refused answer) loses nothing.
   * Absent from a sidecar older than this. */
  batch: z.string().regex(/^[0-9a-f]{16}$/).optional(),
});
export type PodAuditBatch = z.infer<typeof PodAuditBatchSchema>;
