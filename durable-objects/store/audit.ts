// Audit trail of control-plane changes.
import { auditEvents } from "../../schema/db/tables.ts";
import type { Db } from "./db.ts";

export interface AuditEvent {
  teamId: string | null;
  keyId: string | null;
  action: string;
  target?: string;
  detail?: Record<string, unknown>;
}

export async function audit(db: Db, ev: AuditEvent, now = Date.now()): Promise<void> {
  await db.insert(auditEvents).values({ at: now, teamId: ev.teamId, keyId: ev.keyId, action: ev.action, target: ev.target ?? null, detail: ev.detail ?? null });
}
