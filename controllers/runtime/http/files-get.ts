// GET /files: download one file, whole or a Range, gzip-encoded when the client accepts it.
import { constants, createReadStream } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { posix } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGzip, deflateRawSync } from "node:zlib";
import type { RuntimeSandbox } from "../sandbox.ts";
import { acceptsIdentity, chooseEncoding, parseRange } from "./content-negotiation.ts";
import { authorizeFiles, hostPathFor } from "./file-access.ts";
import { HttpError } from "./respond.ts";

/** The most read of a file that reports a size of 0 (kernel files are far smaller). */
const PSEUDO_FILE_MAX = 16 * 1024 * 1024;

/** Read and gzip in 1 MiB pieces: at 64 KiB (the streams' default) a 100 MB download was
 * thousands of thread-pool reads and socket writes, each an event loop turn. */
const CHUNK = 1024 * 1024;

/** Bytes of the file's start compressed to decide whether gzip is worth it (see gzipWorthIt). */
const SAMPLE = 64 * 1024;

/** Whether gzip would shrink the file, judged on its first 64 KiB: for data that does not
 * compress (media, archives, random bytes) gzip only burns CPU on both sides (100 MB of random
 * data took ~5 s of the runtime's CPU at level 1 on the shared 2-core machine and more in the
 * client's inflate) and makes the body larger. Identity is always acceptable to a client that
 * accepts gzip unless it said `identity;q=0` (acceptsIdentity), and then gzip it is. Small files are gzipped as asked: the sample would be the whole work. */
async function gzipWorthIt(fh: FileHandle, size: number): Promise<boolean> {
  if (size <= SAMPLE) return true;
  const sample = Buffer.allocUnsafe(SAMPLE);
  const { bytesRead } = await fh.read(sample, 0, SAMPLE, 0);
  const packed = deflateRawSync(sample.subarray(0, bytesRead), { level: 1 });
  return packed.length < bytesRead * 0.9;
}

async function readBounded(fh: FileHandle, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  while (total < max) {
    const buf = Buffer.alloc(Math.min(64 * 1024, max - total));
    const { bytesRead } = await fh.read(buf, 0, buf.length, null);
    if (bytesRead === 0) break;
    chunks.push(buf.subarray(0, bytesRead));
    total += bytesRead;
  }
  return Buffer.concat(chunks);
}

export async function getFiles(req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox, url: URL): Promise<void> {
  const { user, rawPath } = authorizeFiles(req, sbx, url, "read");
  if (!rawPath) throw new HttpError(400, "path is required");
  const { path, pinned } = hostPathFor(sbx, user, rawPath, "read");
  // In its directory held open, a final link swapped in since the path was resolved is not
  // followed, and a FIFO does not block the open: the runtime may be the host's root reading a
  // tree the tenant shaped (pinned-path.ts).
  const fh = await open(pinned.host, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
    .catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT" || err.code === "ENOTDIR") throw new HttpError(404, `path '${path}' does not exist`);
      if (err.code === "ELOOP") throw new HttpError(400, `path '${path}' is not a valid file path`);
      if (err.code === "EACCES" || err.code === "EPERM") throw new HttpError(403, `error opening file '${path}': permission denied`);
      throw err;
    })
    .finally(() => pinned.close());
  let handedOver = false;
  try {
    const st = await fh.stat();
    if (st.isDirectory()) throw new HttpError(400, `path '${path}' is a directory`);
    if (!st.isFile()) throw new HttpError(400, `path '${path}' is not a regular file`);
    const accepted = chooseEncoding(req.headers["accept-encoding"]);
    if (!accepted) throw new HttpError(406, "no acceptable encoding found, supported: [identity, gzip]");
    // Kernel files (/proc, /sys) report a size of 0 and have content: read them whole (they are
    // small; bounded) so the length is exact, as the SDK reads `Content-Length: 0` as empty.
    const pseudo = st.isFile() && st.size === 0 ? await readBounded(fh, PSEUDO_FILE_MAX) : undefined;
    const size = pseudo?.length ?? st.size;
    const body = (start?: number, end?: number): Readable => {
      if (pseudo) return Readable.from([pseudo.subarray(start ?? 0, end === undefined ? undefined : end + 1)]);
      handedOver = true;
      return createReadStream("", { fd: fh, start, end, highWaterMark: CHUNK });
    };
    const range = parseRange(req.headers.range, size);
    const headers: Record<string, string | number> = {
      "content-type": "application/octet-stream",
      // Never run as a script or page: a signed URL serves this from the edge's own host.
      "x-content-type-options": "nosniff",
      "content-disposition": `inline; filename="${posix.basename(path).replace(/["\\]/g, "_")}"`,
      "last-modified": st.mtime.toUTCString(),
      "accept-ranges": "bytes",
      vary: "Accept-Encoding",
    };
    if (range === "unsatisfiable") {
      res.writeHead(416, { "content-range": `bytes */${size}` }).end();
      return;
    }
    if (req.method === "HEAD") {
      res.writeHead(200, { ...headers, "content-length": size }).end();
      return;
    }
    if (range) {
      res.writeHead(206, { ...headers, "content-range": `bytes ${range.start}-${range.end}/${size}`, "content-length": range.end - range.start + 1 });
      await pipeline(body(range.start, range.end), res);
      return;
    }
    // Empty files go out identity-encoded with an exact length: the SDK reads
    // `Content-Length: 0` as the empty-file signal.
    const gzip = accepted === "gzip" && size > 0 && (!acceptsIdentity(req.headers["accept-encoding"]) || pseudo !== undefined || (await gzipWorthIt(fh, size)));
    if (gzip) {
      res.writeHead(200, { ...headers, "content-encoding": "gzip" });
      await pipeline(body(), createGzip({ level: 1, chunkSize: CHUNK }), res);
      return;
    }
    res.writeHead(200, { ...headers, "content-length": size });
    await pipeline(body(), res);
  } finally {
    if (!handedOver) await fh.close();
  }
}
