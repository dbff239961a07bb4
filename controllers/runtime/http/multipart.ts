// A streaming multipart/form-data reader for POST /files: parts are handed out as streams while
// the body is still arriving, so a 100 MB upload never sits in memory (Request.formData() would
// buffer it, and pull in the fetch machinery besides).
import { PassThrough, type Readable } from "node:stream";
import { once } from "node:events";

export interface PartInfo {
  name: string;
  filename: string | undefined;
}

export class MultipartError extends Error {}

export function boundaryOf(contentType: string): string | undefined {
  const m = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return m ? (m[1] ?? m[2]) : undefined;
}

/** Parses one `Content-Disposition: form-data; name="…"; filename="…"` header block. */
export function parsePartHeaders(block: string): PartInfo {
  const line = block.split("\r\n").find((l) => /^content-disposition:/i.test(l));
  if (!line) throw new MultipartError("part without Content-Disposition");
  const params = new Map<string, string>();
  const re = /;\s*([\w*-]+)=(?:"((?:[^"\\]|\\.)*)"|([^;]*))/g;
  for (let m; (m = re.exec(line)); ) params.set(m[1]!.toLowerCase(), m[2] !== undefined ? m[2].replace(/\\(.)/g, "$1") : m[3]!.trim());
  return { name: params.get("name") ?? "", filename: params.get("filename") };
}

/** Calls `onPart` for each part in order with a stream of its body, and waits for the returned
 * promise before reading on (so parts are written one at a time, with backpressure). */
export async function readMultipart(body: Readable, boundary: string, onPart: (info: PartInfo, data: Readable) => Promise<void>): Promise<number> {
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  // The first delimiter has no leading CRLF; pretend it had one.
  let buf: Buffer = Buffer.from("\r\n");
  type State = "preamble" | "after-delimiter" | "headers" | "body" | "done";
  let state = "preamble" as State;
  let part: { stream: PassThrough; done: Promise<void> } | undefined;
  let count = 0;

  async function emit(data: Buffer): Promise<void> {
    if (!part || !data.length) return;
    if (!part.stream.write(data)) await Promise.race([once(part.stream, "drain"), part.done]);
  }

  async function finishPart(): Promise<void> {
    if (!part) return;
    part.stream.end();
    await part.done;
    part = undefined;
  }

  async function step(): Promise<boolean> {
    if (state === "preamble" || state === "body") {
      const i = buf.indexOf(delimiter);
      if (i < 0) {
        // Keep a tail that could be the start of a delimiter split across chunks.
        const keep = Math.min(buf.length, delimiter.length - 1);
        if (state === "body") await emit(buf.subarray(0, buf.length - keep));
        buf = buf.subarray(buf.length - keep);
        return false;
      }
      if (state === "body") {
        await emit(buf.subarray(0, i));
        await finishPart();
      }
      buf = buf.subarray(i + delimiter.length);
      state = "after-delimiter";
      return true;
    }
    if (state === "after-delimiter") {
      if (buf.length < 2) return false;
      if (buf[0] === 0x2d && buf[1] === 0x2d) {
        state = "done";
        return false;
      }
      // Transport padding (spaces/tabs) may precede the CRLF.
      const eol = buf.indexOf("\r\n");
      if (eol < 0) return false;
      buf = buf.subarray(eol + 2);
      state = "headers";
      return true;
    }
    if (state === "headers") {
      const end = buf.indexOf("\r\n\r\n");
      const blank = buf.subarray(0, 2).toString() === "\r\n";
      if (end < 0 && !blank) {
        if (buf.length > 16 * 1024) throw new MultipartError("part headers are too large");
        return false;
      }
      const headerEnd = blank ? 0 : end;
      const info = parsePartHeaders(buf.subarray(0, headerEnd).toString("utf8"));
      buf = buf.subarray(headerEnd + (blank ? 2 : 4));
      const stream = new PassThrough({ highWaterMark: 1024 * 1024 });
      // Errors reach the consumer through its own pipeline; without a consumer they must not
      // become an uncaught 'error' event.
      stream.on("error", () => {});
      count++;
      part = { stream, done: onPart(info, stream) };
      // A consumer that fails early must not leave the parser waiting for a drain.
      part.done.catch(() => stream.resume());
      state = "body";
      return true;
    }
    return false;
  }

  /** Whether no delimiter starts in `tail`, the few bytes a part's body held back (they could
   * have begun one), decided from them and the next chunk's first bytes. */
  function tailIsData(tail: Buffer, chunk: Buffer): boolean {
    if (chunk.length < delimiter.length - 1) return false;
    const at = Buffer.concat([tail, chunk.subarray(0, delimiter.length - 1)]).indexOf(delimiter);
    return at < 0 || at >= tail.length;
  }

  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      if (state === "done") continue;
      // Inside a part's body each chunk is searched and handed on as it came: joining it to the
      // held-back tail would copy every byte of the upload once more (and allocate a buffer per
      // chunk, which the GC then chases).
      if (state === "body" && buf.length && tailIsData(buf, chunk)) {
        await emit(buf);
        buf = chunk;
      } else buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      while (await step());
    }
  } catch (err) {
    part?.stream.destroy(err as Error);
    await part?.done.catch(() => {});
    throw err;
  }
  if (state !== "done") {
    part?.stream.destroy(new MultipartError("multipart body ended before its closing boundary"));
    await part?.done.catch(() => {});
    throw new MultipartError("multipart body ended before its closing boundary");
  }
  return count;
}
