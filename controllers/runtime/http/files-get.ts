// GET /files: download one file, whole or a Range, gzip-encoded when the client accepts it.
import { createReadStream } from "node:fs";
import { open } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { posix } from "node:path";
import { pipeline } from "node:stream/promises";
import { createGzip } from "node:zlib";
import type { RuntimeSandbox } from "../sandbox.ts";
import { chooseEncoding, parseRange } from "./content-negotiation.ts";
import { authorizeFiles, hostPathFor } from "./file-access.ts";
import { HttpError } from "./respond.ts";

export async function getFiles(req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox, url: URL): Promise<void> {
  const { user, rawPath } = authorizeFiles(req, sbx, url, "read");
  if (!rawPath) throw new HttpError(400, "path is required");
  const { path, host } = hostPathFor(sbx, user, rawPath);
  const fh = await open(host, "r").catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT" || err.code === "ENOTDIR") throw new HttpError(404, `path '${path}' does not exist`);
    if (err.code === "EACCES" || err.code === "EPERM") throw new HttpError(403, `error opening file '${path}': permission denied`);
    throw err;
  });
  let handedOver = false;
  try {
    const st = await fh.stat();
    if (st.isDirectory()) throw new HttpError(400, `path '${path}' is a directory`);
    const encoding = chooseEncoding(req.headers["accept-encoding"]);
    if (!encoding) throw new HttpError(406, "no acceptable encoding found, supported: [identity, gzip]");
    const range = parseRange(req.headers.range, st.size);
    const headers: Record<string, string | number> = {
      "content-type": "application/octet-stream",
      "content-disposition": `inline; filename="${posix.basename(path).replace(/["\\]/g, "_")}"`,
      "last-modified": st.mtime.toUTCString(),
      "accept-ranges": "bytes",
      vary: "Accept-Encoding",
    };
    if (range === "unsatisfiable") {
      res.writeHead(416, { "content-range": `bytes */${st.size}` }).end();
      return;
    }
    if (req.method === "HEAD") {
      res.writeHead(200, { ...headers, "content-length": st.size }).end();
      return;
    }
    if (range) {
      res.writeHead(206, { ...headers, "content-range": `bytes ${range.start}-${range.end}/${st.size}`, "content-length": range.end - range.start + 1 });
      handedOver = true;
      await pipeline(createReadStream("", { fd: fh, start: range.start, end: range.end }), res);
      return;
    }
    // Small or empty files go out identity-encoded with an exact length: the SDK reads
    // `Content-Length: 0` as the empty-file signal, and gzip only adds overhead there.
    if (encoding === "gzip" && st.size > 0) {
      res.writeHead(200, { ...headers, "content-encoding": "gzip" });
      handedOver = true;
      await pipeline(createReadStream("", { fd: fh }), createGzip({ level: 1 }), res);
      return;
    }
    res.writeHead(200, { ...headers, "content-length": st.size });
    handedOver = true;
    await pipeline(createReadStream("", { fd: fh }), res);
  } finally {
    if (!handedOver) await fh.close();
  }
}
