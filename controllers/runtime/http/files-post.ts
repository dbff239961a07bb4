// POST /files: multipart (parts named "file"; the target is the `path` query or the part's
// filename) or a raw octet-stream body (the `path` query names the target), optionally
// gzip-encoded. Parent directories are created; files are truncated and belong to the user.
import { constants, createWriteStream, type BigIntStats } from "node:fs";
import { lstat, open } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { posix } from "node:path";
import { PassThrough, type Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import { mkdirsAs, ownerOnHost } from "../filesystem/mkdirs.ts";
import { createRefused, createRefusedMessage } from "../fs-errors.ts";
import type { PinnedPath } from "../pinned-path.ts";
import type { RuntimeSandbox } from "../sandbox.ts";
import type { SandboxUser } from "../sandbox-view.ts";
import { authorizeFiles, hostPathFor } from "./file-access.ts";
import { boundaryOf, MultipartError, readMultipart } from "./multipart.ts";
import { drainUpload, HttpError, sendJson } from "./respond.ts";
import { parseMetadataHeaders } from "./upload-metadata.ts";

/** Buffered per stage of an upload: at the streams' 16 KiB default every socket chunk waited on
 * its own thread-pool write before the next was read; 1 MiB lets writes batch (writev). */
const UPLOAD_BUFFER = 1024 * 1024;

interface Written {
  path: string;
  name: string;
  type: "file";
  metadata?: Record<string, string>;
}


function decoded(req: IncomingMessage, body: Readable): Readable {
  const enc = (req.headers["content-encoding"] ?? "identity").toLowerCase();
  if (enc === "gzip") return body.pipe(createGunzip());
  if (enc !== "identity") throw new HttpError(400, `unsupported content encoding '${enc}'`);
  return body;
}

/** Go's os.PathError text (`open /opt/a: read-only file system`), as envd's messages carry it. */
function goError(err: unknown, op: string, path: string): string {
  const reason = ((err as Error).message ?? String(err)).replace(/^\w+: /, "").replace(/, \w+ '.*'$/, "");
  return `${op} ${path}: ${reason}`;
}

const WRITE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW | constants.O_NONBLOCK;

function diskFull(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code === "ENOSPC" || code === "EDQUOT";
}

async function writeOne(sbx: RuntimeSandbox, user: SandboxUser, rawPath: string, data: Readable, metadata: Record<string, string>): Promise<Written> {
  const { path, pinned } = hostPathFor(sbx, user, rawPath, "none", { create: true });
  try {
    return await writePinned(sbx, user, path, pinned, data, metadata);
  } finally {
    pinned.close();
  }
}

/** The write itself, every name inside a directory held open (pinned-path.ts): the runtime may
 * be the host's root writing into a tree the tenant shapes while it writes. */
async function writePinned(sbx: RuntimeSandbox, user: SandboxUser, path: string, pinned: PinnedPath, data: Readable, metadata: Record<string, string>): Promise<Written> {
  // A kernel file is read only: written by the host's root it would act with the agent's rights.
  if (pinned.kernelFile) throw new HttpError(403, `path '${path}' is the kernel's (procfs): the files API does not write it; write it with a command in the sandbox`);
  if (pinned.lstat()?.isDirectory()) throw new HttpError(400, `path '${path}' is a directory`);
  // envd's order and answers: directories first, then the open, each failure a 500 naming it
  // (a read-only file system included), a full disk 507.
  try {
    await mkdirsAs(pinned, user, sbx.view);
  } catch (err) {
    if (diskFull(err)) throw new HttpError(507, "not enough disk space available");
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOTDIR" || code === "ELOOP") throw new HttpError(400, `path '${path}' is not a valid file path`);
    if (createRefused(err)) throw new HttpError(403, createRefusedMessage("create directories for", path));
    throw new HttpError(500, `error ensuring directories: ${goError(err, "mkdir", posix.dirname(path))}`);
  }
  const host = pinned.host;
  let fh;
  try {
    // As "w", but a final link is not followed and a FIFO does not block.
    fh = await open(host, WRITE_FLAGS, 0o644);
  } catch (err) {
    if (diskFull(err)) throw new HttpError(507, "not enough disk space available");
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOTDIR" || code === "EISDIR" || code === "ELOOP") throw new HttpError(400, `path '${path}' is not a valid file path`);
    // A FIFO nobody reads (O_NONBLOCK), a device node on a nodev mount.
    if (code === "ENXIO" || (code === "EACCES" && (await lstat(host).catch(() => undefined))?.isFile() === false)) throw new HttpError(400, `path '${path}' is not a regular file`);
    if (createRefused(err)) throw new HttpError(403, createRefusedMessage("create", path));
    throw new HttpError(500, `error opening file: ${goError(err, "open", path)}`);
  }
  if (!(await fh.stat()).isFile()) {
    await fh.close();
    throw new HttpError(400, `path '${path}' is not a regular file`);
  }
  try {
    const owner = ownerOnHost(sbx.view, user);
    await fh.chown(owner.uid, owner.gid);
    // The stream owns the handle from here and closes it, on error too.
    await pipeline(data, createWriteStream("", { fd: fh, highWaterMark: UPLOAD_BUFFER }));
  } catch (err) {
    await fh.close().catch(() => {});
    const code = (err as NodeJS.ErrnoException).code;
    if (diskFull(err)) throw new HttpError(507, "not enough disk space available");
    if (code === "Z_DATA_ERROR" || code === "Z_BUF_ERROR") throw new HttpError(400, "invalid gzip body");
    throw err;
  }
  await sbx.metadata.set(host, (await lstat(host, { bigint: true })) as BigIntStats, metadata);
  const out: Written = { path, name: posix.basename(path), type: "file" };
  if (Object.keys(metadata).length) out.metadata = metadata;
  return out;
}

export async function postFiles(req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox, url: URL): Promise<void> {
  // Consumers get a pipe, never `req` itself: a failed write destroys its source, and the rest of
  // the upload must still be read before the error is answered (drainUpload).
  const body = req.pipe(new PassThrough());
  try {
    sendJson(res, 200, await receive(req, body, sbx, url));
  } catch (err) {
    req.unpipe(body);
    body.destroy();
    await drainUpload(req, res);
    throw err;
  }
}

async function receive(req: IncomingMessage, body: Readable, sbx: RuntimeSandbox, url: URL): Promise<Written[]> {
  const { user, rawPath } = authorizeFiles(req, sbx, url, "write");
  const meta = parseMetadataHeaders(req.headers);
  if ("error" in meta) throw new HttpError(400, meta.error);
  const type = (req.headers["content-type"] ?? "").toLowerCase();

  if (!type.startsWith("multipart/form-data")) {
    if (!rawPath) throw new HttpError(400, "path query parameter is required for an octet-stream upload");
    return [await writeOne(sbx, user, rawPath, decoded(req, body), meta.metadata)];
  }

  const boundary = boundaryOf(type);
  if (!boundary) throw new HttpError(400, "multipart body without a boundary");
  // envd: the `path` query, when given, names the target of every part (so several parts with
  // it collide); otherwise each part's filename does.
  const seen = new Set<string>();
  const written: Written[] = [];
  await readMultipart(decoded(req, body), boundary, async (info, data) => {
    if (info.name !== "file") return void data.resume();
    const target = rawPath || info.filename;
    if (!target) throw new HttpError(400, "a file part has no filename and no path query was given");
    const resolved = sbx.resolvePath(target, user);
    if (seen.has(resolved)) throw new HttpError(400, `the same path '${resolved}' appears more than once`);
    seen.add(resolved);
    written.push(await writeOne(sbx, user, target, data, meta.metadata));
  }).catch((err: unknown) => {
    if (err instanceof MultipartError) throw new HttpError(400, `invalid multipart body: ${err.message}`);
    // A part's write error (a full disk) can end the parse before writeOne's own mapping does.
    if (diskFull(err)) throw new HttpError(507, "not enough disk space available");
    throw err;
  });
  if (!written.length) throw new HttpError(400, "no file part in the multipart body");
  return written;
}
