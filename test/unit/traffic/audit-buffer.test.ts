// The pod sidecar's audit buffer (controllers/traffic/audit-buffer.ts): what a request's tenant
// bytes can make of a record is cut to the bounds the agent checks (schema/protocol/pod-audit.ts),
// so a long path is kept cut rather than making the agent refuse the batch (and with it the other
// records); past MAX_POD_AUDIT_RECORDS between two pulls records are counted, not kept.
import { describe, expect, it } from "vitest";
import { AuditBuffer } from "../../../controllers/traffic/audit-buffer.ts";
import { MAX_AUDIT_PATH, MAX_POD_AUDIT_RECORDS, PodAuditBatchSchema } from "../../../schema/protocol/pod-audit.ts";

const record = { sandbox: "", host: "api.test", method: "GET", path: "/x", rule: "r", status: 200, bytesOut: 0, bytesIn: 5, refused: false };

describe("the sidecar's audit buffer", () => {
  it("cuts what the tenant's request chose to the agent's bounds, and the batch passes the agent's check", () => {
    const b = new AuditBuffer(undefined);
    b.add({ ...record, host: "h".repeat(300), path: `/${"p".repeat(5000)}`, method: "M-SEARCH", tool: "t".repeat(1000), rule: "r".repeat(1000) });
    b.add({ ...record, method: "GET /x HTTP/1.1" });
    const batch = b.take();
    expect(PodAuditBatchSchema.safeParse(batch).success).toBe(true);
    expect(batch.records[0]!.path).toHaveLength(MAX_AUDIT_PATH);
    expect(batch.records[0]!.method).toBe("M-SEARCH");
    expect(batch.records[1]!.method).toBe("OTHER");
  });

  it("keeps MAX_POD_AUDIT_RECORDS between pulls, counts the rest, and hands them over once", () => {
    const b = new AuditBuffer(undefined);
    for (let i = 0; i < MAX_POD_AUDIT_RECORDS + 7; i++) b.add(record);
    const batch = b.take();
    expect(batch.records).toHaveLength(MAX_POD_AUDIT_RECORDS);
    expect(batch.dropped).toBe(7);
    expect(b.take()).toEqual({ records: [], dropped: 0 });
  });
});
