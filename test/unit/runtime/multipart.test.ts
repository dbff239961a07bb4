import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { boundaryOf, parsePartHeaders, readMultipart } from "../../../controllers/runtime/http/multipart.ts";

async function parse(body: Buffer, boundary: string, chunk: number) {
  const chunks: Buffer[] = [];
  for (let i = 0; i < body.length; i += chunk) chunks.push(body.subarray(i, i + chunk));
  const parts: { name: string; filename?: string; data: string }[] = [];
  await readMultipart(Readable.from(chunks), boundary, async (info, data) => {
    const bufs: Buffer[] = [];
    for await (const d of data) bufs.push(d as Buffer);
    parts.push({ ...info, data: Buffer.concat(bufs).toString("latin1") });
  });
  return parts;
}

describe("readMultipart", () => {
  it("parses what FormData serialises, at every chunk size", async () => {
    const form = new FormData();
    form.append("file", new Blob(["first\r\n--not-a-boundary"]), "dir/a.txt");
    form.append("file", new Blob([""]), "empty.txt");
    form.append("file", new Blob([new Uint8Array([0, 13, 10, 45, 45, 255])]), 'q"uote.bin');
    const res = new Response(form);
    const boundary = boundaryOf(res.headers.get("content-type")!)!;
    const body = Buffer.from(await res.arrayBuffer());
    for (const chunk of [1, 2, 3, 7, 64, body.length]) {
      const parts = await parse(body, boundary, chunk);
      expect(parts.map((p) => p.filename)).toEqual(["dir/a.txt", "empty.txt", "q%22uote.bin"]);
      expect(parts.map((p) => p.data)).toEqual(["first\r\n--not-a-boundary", "", "\x00\r\n--\xff"]);
    }
  });

  it("finds a delimiter split between two chunks at any point, and keeps a delimiter-like tail as data", async () => {
    // The first part's body ends in the start of a delimiter ("\r\n--" and a prefix of the
    // boundary), so the bytes held back at a chunk's end are sometimes data and sometimes the
    // real delimiter's start.
    const boundary = "----formdata-x1";
    const one = "a".repeat(300) + "\r\n------form";
    const two = "b".repeat(300);
    const part = (name: string, data: string) => `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${name}"\r\n\r\n${data}\r\n`;
    const body = Buffer.from(part("one.bin", one) + part("two.bin", two) + `--${boundary}--\r\n`, "latin1");
    for (let cut = 1; cut < body.length; cut++) {
      const parts: string[] = [];
      await readMultipart(Readable.from([body.subarray(0, cut), body.subarray(cut)]), boundary, async (_info, data) => {
        const bufs: Buffer[] = [];
        for await (const d of data) bufs.push(d as Buffer);
        parts.push(Buffer.concat(bufs).toString("latin1"));
      });
      expect(parts, `split at ${cut}`).toEqual([one, two]);
    }
  });

  it("rejects a body without its closing boundary", async () => {
    const body = Buffer.from("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\nabc");
    await expect(parse(body, "b", 4)).rejects.toThrow(/closing boundary/);
  });

  it("reads boundaries and dispositions", () => {
    expect(boundaryOf('multipart/form-data; boundary="a b"')).toBe("a b");
    expect(boundaryOf("multipart/form-data; boundary=----x1")).toBe("----x1");
    expect(parsePartHeaders('Content-Disposition: form-data; name="file"; filename="a\\"b"\r\nContent-Type: text/plain')).toEqual({ name: "file", filename: 'a"b' });
  });
});
