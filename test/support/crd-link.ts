// The CRD-sync side of a scripted agent (schema/protocol/crd-sync.ts): sends `sandboxsets`,
// `requests`, `claims` and `quotas` items through the ScriptedAgent's socket and collects the edge's
// `replies` by tapping the transport, so scripted-agent.ts itself stays untouched.
import { parseFrame, RepliesSchema, type ReplyItem } from "../../schema/protocol/index.ts";
import type { ScriptedAgent, Transport } from "./scripted-agent.ts";

type CrdType = "sandboxsets" | "requests" | "claims" | "quotas" | "autoscalers" | "updateops" | "securityprofileobjects" | "trafficpolicyobjects";

export class CrdLink {
  readonly replies = new Map<string, ReplyItem>();
  private agent: ScriptedAgent | null = null;
  private next = 0;

  /** Wraps a transport so every `replies` frame on the socket lands in `replies`. */
  tap(transport: Transport): Transport {
    return async () => {
      const ws = await transport();
      ws.addEventListener("message", (ev) => {
        const parsed = parseFrame(RepliesSchema, String(ev.data));
        if (parsed.ok) for (const r of parsed.value.items) this.replies.set(r.id, r);
      });
      return ws;
    };
  }

  /** Connects the agent through the tapped transport. */
  async connect(agent: ScriptedAgent, transport: Transport): Promise<void> {
    this.agent = agent;
    await agent.connect(this.tap(transport));
  }

  /** Sends one item (an `id` is added) and waits for its reply. */
  async call(type: CrdType, item: Record<string, unknown>, timeoutMs = 15_000): Promise<ReplyItem> {
    const agent = this.agent;
    if (!agent) throw new Error("connect first");
    const id = `t${this.next++}`;
    agent.sendRaw(JSON.stringify({ type, items: [{ ...item, id }] }));
    await agent.waitUntil(() => this.replies.has(id), timeoutMs);
    return this.replies.get(id)!;
  }
}
