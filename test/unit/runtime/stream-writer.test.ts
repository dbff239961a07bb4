// The runtime's streaming-response writer (controllers/runtime/http/stream-writer.ts) on a real
// loopback HTTP server, read as raw bytes so the chunked framing shows what left together.
import { createServer, type ServerResponse } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { streamWriter } from "../../../controllers/runtime/http/stream-writer.ts";

let close: (() => void) | undefined;
afterEach(() => close?.());

/** Serves one request with `respond` and returns the response body as raw chunked bytes. */
async function rawBody(respond: (res: ServerResponse) => void | Promise<void>): Promise<string> {
  const server = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "application/x-ndjson" });
    void respond(res);
  });
  close = () => server.close();
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const socket = connect((server.address() as AddressInfo).port, "127.0.0.1");
  socket.write("GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
  let raw = "";
  socket.setEncoding("utf8").on("data", (d: string) => (raw += d));
  await new Promise((ok) => socket.once("close", ok));
  expect(raw.toLowerCase()).toContain("transfer-encoding: chunked");
  return raw.slice(raw.indexOf("\r\n\r\n") + 4);
}

const chunk = (text: string) => `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`;
const turn = () => new Promise((ok) => setTimeout(ok, 20));
// The response's first chunk leaves with its head, framed on its own: each case sends one first.
const FIRST = "first\n";

describe("streamWriter", () => {
  it("sends every line written just before the end, with the end (node drops a corked chunk at end())", async () => {
    const lines = Array.from({ length: 10 }, (_, i) => `{"line":${i}}\n`);
    const body = await rawBody(async (res) => {
      const w = streamWriter(res);
      w.write(FIRST);
      await turn();
      for (const l of lines) w.write(l);
      w.end();
    });
    expect(body).toBe(`${chunk(FIRST)}${chunk(lines.join(""))}0\r\n\r\n`);
  });

  it("sends the lines of one loop turn as one chunk, later lines as their own, in order", async () => {
    const body = await rawBody(async (res) => {
      const w = streamWriter(res);
      w.write(FIRST);
      await turn();
      w.write("a\n");
      w.write("b\n");
      w.write("c\n");
      await turn();
      w.write("d\n");
      await turn();
      w.write("e\n");
      w.end();
    });
    expect(body).toBe(`${chunk(FIRST)}${chunk("a\nb\nc\n")}${chunk("d\n")}${chunk("e\n")}0\r\n\r\n`);
  });

  it("ignores writes and a second end once the response ended", async () => {
    const body = await rawBody(async (res) => {
      const w = streamWriter(res);
      w.write("only\n");
      await turn();
      w.end();
      w.write("late\n");
      w.end();
    });
    expect(body).toBe(`${chunk("only\n")}0\r\n\r\n`);
  });
});
