// MCP tool ACLs on JSON-RPC (streamable HTTP and SSE): a `tools/call` to a tool the policy denies
// is answered by the proxy with a JSON-RPC error naming the rule and never sent; a `tools/list`
// answer loses the tools the policy denies. Pure: bodies in, bodies out.
// Every answer from a governed server whose result carries a `tools` list is filtered, whatever
// request it answers: over the SSE transport answers come on another HTTP request than the one
// that asked, and filtering by shape cannot be walked around by reusing ids.
import type { ToolVerdict } from "./policy.ts";

/** The verdict for one tool of the server at hand (undefined: not governed). */
export type ToolDecider = (tool: string) => ToolVerdict | undefined;

/** Longer tool names are denied without matching. */
export const MAX_TOOL_NAME = 256;

/** JSON-RPC's server-error range; the SDKs surface the message. */
export const TOOL_DENIED_CODE = -32001;

type Id = string | number | null;
interface RpcMessage {
  jsonrpc?: unknown;
  id?: Id;
  method?: unknown;
  params?: { name?: unknown } & Record<string, unknown>;
  result?: { tools?: unknown } & Record<string, unknown>;
}

export interface ToolDecision {
  tool: string;
  allowed: boolean;
  rule: string;
}

export interface Screened {
  /** Set when the request must not be sent: the JSON body to answer with (status 200), or ""
   * when no refused message carries an id (notifications: answered 202, nothing sent). */
  answer?: string;
  /** Each `tools/call` and its verdict (for the audit). */
  calls: ToolDecision[];
  /** Set when the body is not JSON-RPC: why it is refused (a body the proxy cannot read is one it
   * cannot screen, and the server might read it otherwise). */
  invalid?: string;
}

/** A request body's text as screened: strict UTF-8 with a leading BOM dropped (the caller sends
 * this text on, so the server reads exactly what was screened); undefined when not UTF-8. */
export function rpcText(body: Uint8Array): string | undefined {
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(body);
  } catch {
    return undefined;
  }
}

function parse(text: string): RpcMessage | RpcMessage[] | undefined {
  try {
    const v = JSON.parse(text) as unknown;
    return typeof v === "object" && v !== null ? (v as RpcMessage | RpcMessage[]) : undefined;
  } catch {
    return undefined;
  }
}

/** The keys the screen reads, per level. A Go server (encoding/json, e.g. mcp-go) matches a
 * struct's keys case-insensitively, folding each rune as ToUpper(ToLower(r)) (so "ſ" is "s" and
 * "K" is "k"): a key folding to one of these without being it would be read there as what the
 * screen did not read. */
const MESSAGE_KEYS = ["jsonrpc", "id", "method", "params"];
const PARAMS_KEYS = ["name"];
const goFold = (k: string) => k.toLowerCase().toUpperCase();
const FOLDED = new Map([...MESSAGE_KEYS, ...PARAMS_KEYS].map((k) => [k, goFold(k)]));

/** A key of `o` that a case-insensitive reader would take for one of `keys` but is not it. */
function foldedKey(o: object, keys: string[]): string | undefined {
  for (const k of Object.keys(o)) {
    if (keys.includes(k)) continue;
    const f = goFold(k);
    if (keys.some((x) => FOLDED.get(x) === f)) return k;
  }
  return undefined;
}

const deniedError = (id: Id, d: ToolDecision) => ({ jsonrpc: "2.0", id, error: { code: TOOL_DENIED_CODE, message: `tool "${d.tool}" is denied by MCP rule "${d.rule}"`, data: { tool: d.tool, rule: d.rule } } });

/** A request body to `server` (not JSON-RPC: refused, `invalid`). A batch with a denied call is
 * refused whole: each denied call gets its error, the others one saying why they were not sent. */
export function screenRequest(decide: ToolDecider, body: string): Screened {
  const msg = parse(body);
  const out: Screened = { calls: [] };
  if (!msg) return { ...out, invalid: "the body of a POST to a server an MCP rule names must be JSON-RPC (UTF-8 JSON, unencoded)" };
  const list = Array.isArray(msg) ? msg : [msg];
  const denied = new Map<RpcMessage, ToolDecision>();
  for (const m of list) {
    if (typeof m !== "object" || m === null) continue;
    const odd = foldedKey(m, MESSAGE_KEYS) ?? (m.method === "tools/call" && typeof m.params === "object" && m.params !== null ? foldedKey(m.params, PARAMS_KEYS) : undefined);
    if (odd !== undefined) return { ...out, invalid: `the JSON-RPC key ${JSON.stringify(odd.slice(0, 64))} differs from one the screen reads only in case: servers that match keys case-insensitively would read it otherwise` };
    if (m.method !== "tools/call") continue;
    const named = typeof m.params?.name === "string" ? m.params.name : "";
    // A name no rule could be meant for is denied unmatched (matching costs its length).
    const tool = named.slice(0, MAX_TOOL_NAME);
    const v = named.length > MAX_TOOL_NAME ? decide("") && { allowed: false, rule: `a tool name longer than ${MAX_TOOL_NAME} characters` } : decide(tool);
    if (!v) continue;
    const d = { tool, allowed: v.allowed, rule: v.rule };
    out.calls.push(d);
    if (!v.allowed) denied.set(m, d);
  }
  if (denied.size === 0) return out;
  const first = [...denied.values()][0]!;
  const answers = list
    .filter((m) => m?.id !== undefined)
    .map((m) => {
      const d = denied.get(m);
      if (d) return deniedError(m.id!, d);
      return { jsonrpc: "2.0", id: m.id, error: { code: TOOL_DENIED_CODE, message: `not sent: the batch calls tool "${first.tool}", denied by MCP rule "${first.rule}"` } };
    });
  // Refused even when nothing carries an id: a notification is a call a JSON-RPC server may run.
  out.answer = answers.length === 0 ? "" : JSON.stringify(Array.isArray(msg) ? answers : answers[0]);
  return out;
}

/** An answer body (one JSON-RPC message or a batch) with denied tools left out of each result's
 * `tools`; anything else comes back unchanged. */
export function filterAnswer(decide: ToolDecider, body: string): string {
  const msg = parse(body);
  if (!msg) return body;
  let changed = false;
  for (const m of Array.isArray(msg) ? msg : [msg]) {
    if (!m || !Array.isArray(m.result?.tools)) continue;
    m.result.tools = m.result.tools.filter((t: { name?: unknown }) => decide(String(t?.name ?? ""))?.allowed ?? true);
    changed = true;
  }
  return changed ? JSON.stringify(msg) : body;
}

/** An SSE stream's events filtered as `filterAnswer` does with each `data`: feed chunks, get the
 * text to forward (whole events only; a partial event waits for its end). */
export class SseFilter {
  #buf = "";
  readonly #decide: ToolDecider;
  readonly #max: number;

  /** `max`: the longest event held while waiting for its end (characters). */
  constructor(decide: ToolDecider, max = Infinity) {
    this.#decide = decide;
    this.#max = max;
  }

  /** The whole events so far, filtered; undefined when an event outgrew `max` (the stream must
   * end: an event cannot be forwarded before it is read whole, nor held without bound). */
  push(chunk: string): string | undefined {
    this.#buf += chunk;
    let out = "";
    const end = /\r?\n\r?\n/g;
    for (;;) {
      end.lastIndex = this.#from;
      const m = end.exec(this.#buf);
      if (!m) break;
      const event = this.#buf.slice(0, m.index);
      this.#buf = this.#buf.slice(m.index + m[0].length);
      this.#from = 0;
      out += this.#event(event) + "\n\n";
    }
    // What was searched holds no event's end, bar one a later chunk completes (at most 4
    // characters, so it starts in the last 3): a long event is not searched again from its start
    // on every chunk.
    this.#from = Math.max(0, this.#buf.length - 3);
    return this.#buf.length > this.#max ? undefined : out;
  }
  #from = 0;

  /** Characters held while waiting for an event's end. */
  get pending(): number {
    return this.#buf.length;
  }

  /** What is left at the stream's end (an unterminated event, unfiltered data cannot carry a list). */
  end(): string {
    const rest = this.#buf;
    this.#buf = "";
    this.#from = 0;
    return rest ? this.#event(rest) : "";
  }

  #event(event: string): string {
    const lines = event.split(/\r?\n/);
    const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
    if (data.length === 0) return event;
    const filtered = filterAnswer(this.#decide, data.join("\n"));
    if (filtered === data.join("\n")) return event;
    return [...lines.filter((l) => !l.startsWith("data:")), `data: ${filtered}`].join("\n");
  }
}
