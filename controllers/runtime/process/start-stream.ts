// process.Process/Start over the Connect protocol without Connect's server pipeline: the RPC every
// SDK command makes. Connect's handler cost the agent ~1.3 ms of CPU per command here (a chain of
// async-iterable transforms per message, three `Headers` and linked `AbortController`s per
// request, two aborts building a `DOMException` each; bench/agent-cmd.ts, docs/ARCHITECTURE.md).
// This transport takes the one shape the SDKs send for it (a POST of one uncompressed enveloped
// StartRequest, JSON or binary, response uncompressed) and runs the same implementation
// (`start`, start.ts); every other request, and one whose headers ask for anything else
// (compression, an invalid Connect-Timeout-Ms, another content type), goes to Connect, as do all
// other RPCs. What goes on the wire is Connect's: the same serializations, envelopes, end-stream
// message and error codes and texts (test/runtime/start-stream.test.ts compares the bytes).
import type { IncomingMessage, ServerResponse } from "node:http";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextValues } from "@connectrpc/connect";
import { compressedFlag, createMethodSerializationLookup, encodeEnvelope, validateReadWriteMaxBytes } from "@connectrpc/connect/protocol";
import { contentTypeStreamJson, contentTypeStreamProto, endStreamFlag, endStreamToJson } from "@connectrpc/connect/protocol-connect";
import { Process, StartResponseSchema } from "../../../schema/envd/gen/process/process_pb.js";
import { sandboxKey, type RpcContext } from "../request-context.ts";
import { RPC_OPTIONS } from "../rpc-options.ts";
import type { RuntimeSandbox } from "../sandbox.ts";
import { start } from "./start.ts";

export const START_PATH = "/process.Process/Start";

const METHOD = Process.method.start;
// Connect's handler options (rpc-options.ts), each applied here. Adding one this transport does
// not implement fails here: implement it (or leave Start to Connect) first.
const { readMaxBytes, jsonOptions, ...notImplemented } = RPC_OPTIONS;
notImplemented satisfies Record<string, never>;
const LIMITS = validateReadWriteMaxBytes(readMaxBytes, undefined, undefined);
const SERIALIZATION = createMethodSerializationLookup(METHOD, undefined, jsonOptions, LIMITS);
/** The request's bytes are read whole before it starts (Connect reads to the end too, to refuse a
 * second message). An envelope whose length field is past readMaxBytes is refused as Connect
 * refuses it; the body as a whole may hold that and a few end-stream envelopes. */
const MAX_BODY_BYTES = LIMITS.readMaxBytes + 64 * 1024;
/** connect-node's figures for a request answered before its body was read (node-universal-handler). */
const DRAIN_BYTES = 256 * 1024;
const CLOSE_DELAY_MS = 500;
/** The end of a stream that ended well: an EndStreamResponse with nothing in it. */
const END_OK = encodeEnvelope(endStreamFlag, new TextEncoder().encode("{}"));

/** Whether this transport serves the request; the caller hands it to Connect otherwise. */
export function servesStart(req: IncomingMessage, pathname: string): boolean {
  if (pathname !== START_PATH || req.method !== "POST") return false;
  const h = req.headers;
  const type = h["content-type"];
  if (type !== contentTypeStreamJson && type !== contentTypeStreamProto) return false;
  const identity = (v: unknown) => v === undefined || v === "identity";
  if (!identity(h["connect-content-encoding"]) || !identity(h["connect-accept-encoding"])) return false;
  const timeout = h["connect-timeout-ms"];
  return timeout === undefined || (typeof timeout === "string" && /^\d{1,10}$/.test(timeout));
}

/** Reads the request, runs `start` and streams its events; never throws (errors end the stream). */
export async function serveStart(req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox): Promise<void> {
  const binary = req.headers["content-type"] === contentTypeStreamProto;
  const timeoutHeader = req.headers["connect-timeout-ms"];
  const timeoutMs = timeoutHeader === undefined ? undefined : Number(timeoutHeader);
  const aborter = new AbortController();
  // Connect's own reasons: the deadline's error, and a client gone (no DOMException built).
  let deadline: NodeJS.Timeout | undefined;
  const expiresAt = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  const expire = () => aborter.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded));
  if (timeoutMs !== undefined) {
    if (timeoutMs <= 0) expire();
    else deadline = setTimeout(expire, timeoutMs);
  }
  const gone = () => aborter.abort(new ConnectError("the client went away", Code.Canceled));
  res.once("close", gone);
  req.once("error", gone);
  const ctx: RpcContext = {
    values: createContextValues().set(sandboxKey, sbx),
    requestHeader: {
      get: (name) => {
        const v = req.headers[name.toLowerCase()];
        return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
      },
    },
    signal: aborter.signal,
    timeoutMs: () => (expiresAt === undefined ? undefined : expiresAt - Date.now()),
  };
  let headed = false;
  const send = async (chunk: Uint8Array, last: boolean) => {
    if (res.destroyed) return;
    if (!headed) {
      headed = true;
      closeAfterAnswer(req, res);
      res.writeHead(200, { "content-type": binary ? contentTypeStreamProto : contentTypeStreamJson });
    }
    if (last) return void res.end(chunk);
    // Backpressure as Connect's adapter: wait for the client to take it (or to go).
    if (!res.write(chunk)) await new Promise<void>((resolve) => {
      const done = () => {
        res.off("drain", done).off("close", done);
        resolve();
      };
      res.once("drain", done).once("close", done);
    });
  };
  let end = END_OK;
  try {
    const input = onlyMessage(await readBody(req), (data) => SERIALIZATION.getI(binary).parse(data));
    const output = SERIALIZATION.getO(binary);
    for await (const ev of start(input, ctx)) {
      if (res.destroyed) break;
      await send(encodeEnvelope(0, output.serialize(create(StartResponseSchema, ev as MessageInitShape<typeof StartResponseSchema>))), false);
    }
  } catch (e) {
    const error = e instanceof ConnectError ? e : new ConnectError("internal error", Code.Internal, undefined, undefined, e);
    end = encodeEnvelope(endStreamFlag, new TextEncoder().encode(JSON.stringify(endStreamToJson(new Headers(), error, undefined))));
  } finally {
    clearTimeout(deadline);
    res.off("close", gone);
    req.off("error", gone);
  }
  await send(end, true);
}

/** The request's bytes, bounded. Past the bound, as connect-node does on an early answer: the
 * rest is read and dropped up to DRAIN_BYTES, to keep the connection for the next request; a
 * longer rest closes it after the answer (answered() below). */
async function readBody(req: IncomingMessage): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  let size = 0;
  let refused: ConnectError | undefined;
  let drained = 0;
  for await (const c of req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
    if (refused) {
      if ((drained += c.length) > DRAIN_BYTES) break;
      continue;
    }
    // The first envelope's length is refused before its bytes are read, as Connect does.
    if (size < 5 && size + c.length >= 5) {
      const length = (size ? Buffer.concat([...chunks, c]) : c).readUInt32BE(1);
      if (length > LIMITS.readMaxBytes) refused = tooLarge(length);
    }
    size += c.length;
    if (!refused && size > MAX_BODY_BYTES) refused = tooLarge(size);
    if (!refused) chunks.push(c);
  }
  if (refused) throw refused;
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
}

/** connect-node's answer to a request whose body was not read to its end: the connection closes
 * after the answer, half first, so the client's TCP stack does not drop the answer. */
function closeAfterAnswer(req: IncomingMessage, res: ServerResponse): void {
  const socket = res.socket;
  if (req.complete || !socket) return;
  res.setHeader("connection", "close");
  socket.destroySoon = () => void socket.end(() => setTimeout(() => socket.destroy(), CLOSE_DELAY_MS).unref());
}

/** Connect's refusal of a message past readMaxBytes (envelope.js). */
function tooLarge(size: number): ConnectError {
  return new ConnectError(`message size ${size} is larger than configured readMaxBytes ${LIMITS.readMaxBytes}`, Code.ResourceExhausted);
}

/** The one message of a server-streaming request, as Connect reads it: envelopes in order, each
 * parsed as it comes, an end-stream envelope skipped, none or a second one refused. */
function onlyMessage<T>(body: Uint8Array, parse: (data: Uint8Array) => T): T {
  let message: { value: T } | undefined;
  for (let at = 0; at < body.length; ) {
    if (body.length - at < 5) throw new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument);
    const flags = body[at]!;
    const length = new DataView(body.buffer, body.byteOffset + at + 1, 4).getUint32(0);
    if (length > LIMITS.readMaxBytes) throw tooLarge(length);
    if (body.length - at - 5 < length) throw new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument);
    const data = body.subarray(at + 5, at + 5 + length);
    at += 5 + length;
    // No compression was negotiated (servesStart).
    if ((flags & compressedFlag) === compressedFlag) throw new ConnectError("received compressed envelope, but do not know how to decompress", Code.Internal);
    if ((flags & endStreamFlag) === endStreamFlag) continue;
    const value = parse(data);
    if (message) throw new ConnectError("protocol error: received extra input message for server-streaming method", Code.Unimplemented);
    message = { value };
  }
  if (!message) throw new ConnectError("protocol error: missing input message for server-streaming method", Code.Unimplemented);
  return message.value;
}
