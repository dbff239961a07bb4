// POST /files: multipart (parts named "file"; the target is the `path` query or the part's
// filename) or a raw octet-stream body (the `path` query names the target), optionally
// gzip-encoded. Parent directories are created; files are truncated and belong to the user.
import { createWriteStream, type BigIntStats } from "node:fs";
import { chown, lstat, stat } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { posix } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import { mkdirsAs } from "../filesystem/mkdirs.ts";
import type { RuntimeSandbox } from "../sandbox.ts";
import type { SandboxUser } from "../sandbox-view.ts";
import { authorizeFiles, hostPathFor } from "./file-access.ts";
import { boundaryOf, MultipartError, readMultipart } from "./multipart.ts";
import { HttpError, sendJson } from "./respond.ts";
import { parseMetadataHeaders } from "./upload-metadata.ts";

interface Written {
  path: string;
  name: string;
  type: "file";
  metadata?: Record<string, string>;
}

const isFull = (err: unknown) => ["ENOSPC", "EDQUOT"].includes((err as NodeJS.ErrnoException)?.code ?? "");

function decoded(req: IncomingMessage, body: Readable): Readable {
  const enc = (req.headers["content-encoding"] ?? "identity").toLowerCase();
  if (enc === "gzip") return body.pipe(createGunzip());
  if (enc !== "identity") throw new HttpError(400, `unsupported content encoding '${enc}'`);
  return body;
}

async function writeOne(sbx: RuntimeSandbox, user: SandboxUser, rawPath: string, data: Readable, metadata: Record<string, string>): Promise<Written> {
  const { path, host } = hostPathFor(sbx, user, rawPath);
  if ((await stat(host).catch(() => undefined))?.isDirectory()) throw new HttpError(400, `path '${path}' is a directory`);
  try {
    await mkdirsAs(posix.dirname(host), user);
    await pipeline(data, createWriteStream(host, { mode: 0o644 }));
    await chown(host, user.uid, user.gid);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (isFull(err)) throw new HttpError(507, "not enough disk space available");
    if (code === "ENOTDIR" || code === "EISDIR") throw new HttpError(400, `path '${path}' is not a valid file path`);
    if (code === "Z_DATA_ERROR" || code === "Z_BUF_ERROR") throw new HttpError(400, "invalid gzip body");
    throw err;
  }
  sbx.metadata.set((await lstat(host, { bigint: true })) as BigIntStats, metadata);
  const out: Written = { path, name: posix.basename(path), type: "file" };
  if (Object.keys(metadata).length) out.metadata = metadata;
  return out;
}

export async function postFiles(req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox, url: URL): Promise<void> {
  const { user, rawPath } = authorizeFiles(req, sbx, url, "write");
  const meta = parseMetadataHeaders(req.headers);
  if ("error" in meta) throw new HttpError(400, meta.error);
  const type = (req.headers["content-type"] ?? "").toLowerCase();

  if (!type.startsWith("multipart/form-data")) {
    if (!rawPath) throw new HttpError(400, "path query parameter is required for an octet-stream upload");
    sendJson(res, 200, [await writeOne(sbx, user, rawPath, decoded(req, req), meta.metadata)]);
    return;
  }

  const boundary = boundaryOf(type);
  if (!boundary) throw new HttpError(400, "multipart body without a boundary");
  // envd: the `path` query, when given, names the target of every part (so several parts with
  // it collide); otherwise each part's filename does.
  const seen = new Set<string>();
  const written: Written[] = [];
  await readMultipart(decoded(req, req), boundary, async (info, data) => {
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
    if (isFull(err)) throw new HttpError(507, "not enough disk space available");
    throw err;
  });
  if (!written.length) throw new HttpError(400, "no file part in the multipart body");
  sendJson(res, 200, written);
}
