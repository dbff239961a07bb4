// process.Process/Start's lean transport (controllers/runtime/process/start-stream.ts) answers what
// Connect's handler answers, byte for byte (the pid aside): the same request to both, side by side.
import { fromBinary, toBinary, create } from "@bufbuild/protobuf";
import { EventEmitter } from "node:events";
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostView } from "../../controllers/runtime/host-view.ts";
import { rpcHandler } from "../../controllers/runtime/rpc.ts";
import { RuntimeSandbox } from "../../controllers/runtime/sandbox.ts";
import { StartRequestSchema, StartResponseSchema } from "../../schema/envd/gen/process/process_pb.js";

const sbx = new RuntimeSandbox("diff", new HostView());
let servers: Server[] = [];
let lean: number;
let connect: number;

beforeAll(async () => {
  const listen = async (leanStart: boolean) => {
    const handler = rpcHandler(() => sbx, { leanStart });
    const server = createServer(handler);
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    return (server.address() as { port: number }).port;
  };
  lean = await listen(true);
  connect = await listen(false);
});
afterAll(async () => {
  sbx.close();
  await Promise.all(servers.map((s) => new Promise((r) => { s.closeAllConnections(); s.close(r); })));
  servers = [];
});

interface Answer {
  status: number;
  headers: Record<string, unknown>;
  envelopes: { flags: number; data: string }[];
}

/** The raw answer to one request: status, headers (less the date) and the envelopes, each start
 * event's pid set to 0 (each side starts its own process). */
function call(port: number, body: Buffer, headers: Record<string, string>, binary: boolean): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, method: "POST", path: "/process.Process/Start", headers: { "content-type": binary ? "application/connect+proto" : "application/connect+json", ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const buf = Buffer.concat(chunks);
        const envelopes: Answer["envelopes"] = [];
        for (let i = 0; i < buf.length; ) {
          const flags = buf[i]!;
          const len = buf.readUInt32BE(i + 1);
          let data = buf.subarray(i + 5, i + 5 + len);
          if (flags === 0 && binary) {
            const ev = fromBinary(StartResponseSchema, data);
            if (ev.event?.event.case === "start") ev.event.event.value.pid = 0;
            data = Buffer.from(toBinary(StartResponseSchema, ev));
          }
          envelopes.push({ flags, data: flags === 0 && !binary ? data.toString().replace(/"pid":\d+/, '"pid":0') : binary && flags === 0 ? data.toString("base64") : data.toString() });
          i += 5 + len;
        }
        const { date: _d, ...rest } = res.headers;
        resolve({ status: res.statusCode!, headers: rest, envelopes });
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

const env = (flags: number, data: Buffer) => {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(data.length, 1);
  return Buffer.concat([head, data]);
};
const json = (m: unknown) => env(0, Buffer.from(JSON.stringify(m)));
const bash = (script: string, more: Record<string, unknown> = {}) => ({ process: { cmd: "/bin/bash", args: ["-c", script], ...more }, stdin: false });

async function both(body: Buffer, headers: Record<string, string> = {}, binary = false): Promise<Answer> {
  const [a, b] = await Promise.all([call(lean, body, headers, binary), call(connect, body, headers, binary)]);
  expect(a).toEqual(b);
  return a;
}

/** An answer with its output joined per stream: how a pipe's or terminal's bytes split into
 * reads differs from one run of a command to the next, what a client reads does not. */
function joined(a: Answer, binary = false) {
  const out: Record<string, Buffer[]> = {};
  const others: Answer["envelopes"] = [];
  for (const e of a.envelopes) {
    const ev = e.flags === 0 ? (binary ? fromBinary(StartResponseSchema, Buffer.from(e.data, "base64")).event?.event : undefined) : undefined;
    if (ev?.case === "data") (out[ev.value.output.case!] ??= []).push(Buffer.from(ev.value.output.value!));
    else if (!binary && e.flags === 0 && e.data.startsWith('{"event":{"data":')) {
      const [name, b64] = Object.entries(JSON.parse(e.data).event.data)[0] as [string, string];
      (out[name] ??= []).push(Buffer.from(b64, "base64"));
    } else others.push(e);
  }
  return { status: a.status, headers: a.headers, others, output: Object.fromEntries(Object.entries(out).map(([k, v]) => [k, Buffer.concat(v).toString("latin1")])) };
}

async function bothJoined(body: Buffer, headers: Record<string, string> = {}, binary = false) {
  const [a, b] = await Promise.all([call(lean, body, headers, binary), call(connect, body, headers, binary)]);
  const [ja, jb] = [joined(a, binary), joined(b, binary)];
  expect(ja).toEqual(jb);
  return ja;
}

describe("Start's lean transport streams as Connect does", () => {
  it("output over 32 KiB: many data events, the client's backpressure, the same bytes", async () => {
    const a = await bothJoined(json(bash("seq 1 300000")));
    expect(a.output.stdout!.length).toBe(1_988_895);
    expect(a.others.at(-1)).toEqual({ flags: 2, data: "{}" });
  });

  it("the same in binary, with stderr too", async () => {
    const msg = create(StartRequestSchema, bash("seq 1 100000; seq 1 5000 >&2"));
    const a = await bothJoined(env(0, Buffer.from(toBinary(StartRequestSchema, msg))), {}, true);
    expect(a.output.stderr!.length).toBe(23_893);
  });

  it("a terminal", async () => {
    const a = await bothJoined(json({ process: { cmd: "/bin/bash", args: ["-c", "stty size; echo x"] }, pty: { size: { cols: 80, rows: 24 } } }));
    expect(a.output.pty).toBe("24 80\r\nx\r\n");
  });

  it("stdin left at its default (a pipe)", async () => {
    await both(json({ process: { cmd: "/bin/bash", args: ["-c", "echo in"] } }));
  });

  it("a signal mid-stream: the end says so", async () => {
    const a = await bothJoined(json(bash("echo before; kill -9 $$; echo after")));
    expect(a.output.stdout).toBe("before\n");
    expect(a.others.some((e) => e.data.includes('"status":"signal: killed"'))).toBe(true);
  });

  it("keepalives while the command is quiet", async () => {
    const a = await both(json(bash("sleep 1.3")), { "keepalive-ping-interval": "1" });
    expect(a.envelopes.filter((e) => e.data.includes("keepalive"))).toHaveLength(1);
  });

  it("the Python SDK's headers", async () => {
    await both(json(bash("echo py")), { "connect-content-encoding": "identity", "connect-accept-encoding": "identity", "connect-protocol-version": "1", "connect-timeout-ms": "60000" });
  });

  it("binary that is not a StartRequest: the same error", async () => {
    const a = await both(env(0, Buffer.from("not a message")), {}, true);
    expect(JSON.parse(a.envelopes.at(-1)!.data).error.code).toEqual(expect.any(String));
  });

  it.each([["lean"], ["connect"]])("a client gone mid-stream (%s): the process keeps running", async (side) => {
    const port = side === "lean" ? lean : connect;
    const pid = await new Promise<number>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port, method: "POST", path: "/process.Process/Start", headers: { "content-type": "application/connect+json" } }, (res) => {
        res.once("data", (c: Buffer) => {
          resolve(JSON.parse(c.subarray(5, 5 + c.readUInt32BE(1)).toString()).event.start.pid);
          req.destroy();
        });
      });
      req.on("error", () => {});
      req.once("error", reject);
      req.end(json(bash("sleep 30")));
    });
    await new Promise((r) => setTimeout(r, 200));
    const handle = sbx.processes.live().find((h) => h.pid === pid);
    expect(handle).toBeDefined();
    handle!.signal("SIGKILL");
    await handle!.exited();
  });
});

describe("Start's lean transport answers as Connect does", () => {
  it("a command's events and the end of the stream (JSON)", async () => {
    const a = await both(json(bash("echo hi; exit 3")));
    expect(a.status).toBe(200);
    expect(a.envelopes.map((e) => e.flags)).toEqual([0, 0, 0, 2]);
  });

  it("the same in binary", async () => {
    const a = await both(env(0, Buffer.from(toBinary(StartRequestSchema, create(StartRequestSchema, bash("echo hi"))))), {}, true);
    expect(a.headers["content-type"]).toBe("application/connect+proto");
    expect(a.envelopes.at(-1)).toEqual({ flags: 2, data: "{}" });
  });

  it("unknown fields are ignored; an end-stream envelope in the request is skipped", async () => {
    await both(Buffer.concat([json({ ...bash("echo x"), surprise: 1 }), env(2, Buffer.from("{}"))]));
  });

  it.each([
    ["no cmd", json({ process: { args: [] } })],
    ["a cwd that is not there", json(bash("true", { cwd: "/no/such/dir" }))],
    ["no message", Buffer.alloc(0)],
    ["two messages", Buffer.concat([json(bash("true")), json(bash("true"))])],
    ["not JSON", env(0, Buffer.from("{nope"))],
    ["a field of the wrong type", json({ process: { cmd: 5 } })],
    ["a compressed message", env(1, Buffer.from("{}"))],
    ["a cut envelope", json(bash("true")).subarray(0, 9)],
  ])("%s: the same error in the end of the stream", async (_name, body) => {
    const a = await both(body);
    expect(a.envelopes.at(-1)!.flags).toBe(2);
    expect(JSON.parse(a.envelopes.at(-1)!.data).error.code).toEqual(expect.any(String));
  });

  it("a message past 16 MiB: resource_exhausted, also when the request asks for gzip (Connect serves that)", async () => {
    const big = json(bash("true", { envs: { BIG: "x".repeat(17 * 1024 * 1024) } }));
    for (const headers of [{}, { "connect-accept-encoding": "gzip" }] as Record<string, string>[]) {
      const a = await both(big, headers);
      expect(JSON.parse(a.envelopes.at(-1)!.data).error).toEqual({ code: "resource_exhausted", message: `message size ${big.length - 5} is larger than configured readMaxBytes ${16 * 1024 * 1024}` });
    }
  });

  it("a failure while answering is logged and drops the connection; it does not reach the process as an unhandled rejection", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => unhandled.push(e);
    process.on("unhandledRejection", onUnhandled);
    try {
      const req = Object.assign(Readable.from([json(bash("true"))]), { method: "POST", url: "/process.Process/Start", headers: { "content-type": "application/connect+json" } });
      let destroyed!: () => void;
      const gone = new Promise<void>((r) => (destroyed = r));
      // A response whose head cannot be written (what a future throw in the writer looks like).
      const res = Object.assign(new EventEmitter(), {
        destroyed: false,
        socket: null,
        writeHead: () => { throw new Error("cannot write"); },
        destroy: () => destroyed(),
      });
      rpcHandler(() => sbx)(req as unknown as IncomingMessage, res as unknown as ServerResponse);
      await gone;
      await new Promise((r) => setTimeout(r, 50));
      expect(unhandled).toEqual([]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });

  it("a deadline past Node's timer range (a 30-day timeout) lets the command run, on both paths", async () => {
    const a = await both(json(bash("echo ran")), { "connect-timeout-ms": String(30 * 24 * 3600 * 1000) });
    // Before: Node fired the deadline's timers at once, the command was killed, the stream ended deadline_exceeded.
    expect(a.envelopes.at(-1)).toEqual({ flags: 2, data: "{}" });
    expect(a.envelopes.map((e) => e.data)).toContain('{"event":{"data":{"stdout":"cmFuCg=="}}}');
  });

  it("an unknown user: unauthenticated", async () => {
    const a = await both(json(bash("true")), { authorization: `Basic ${Buffer.from("nosuchuser:").toString("base64")}` });
    expect(JSON.parse(a.envelopes.at(-1)!.data).error.code).toBe("unauthenticated");
  });

  it("Connect-Timeout-Ms ends the stream deadline_exceeded", async () => {
    const a = await both(json(bash("sleep 30")), { "connect-timeout-ms": "400" });
    expect(JSON.parse(a.envelopes.at(-1)!.data).error.code).toBe("deadline_exceeded");
  });
});
