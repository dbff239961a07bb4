import type { IncomingMessage } from "node:http";
import { HttpError } from "./respond.ts";

const LIMIT = 1 << 20;

/** The request's JSON body ({} when empty). Read with plain events: the stream's async iterator
 * costs a promise and an end-of-stream watcher per request (each code-interpreter cell is one). */
export function readJson(req: IncomingMessage, limit = LIMIT): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (c: Buffer) => {
      size += c.length;
      if (size > limit) {
        cleanup();
        req.resume(); // the rest is drained, not read
        reject(new HttpError(413, "request body is too large"));
        return;
      }
      chunks.push(c);
    };
    const onEnd = () => {
      cleanup();
      const text = (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)).toString("utf8");
      if (!text.trim()) return resolve({});
      try {
        resolve(JSON.parse(text));
      } catch {
        reject(new HttpError(400, "request body is not valid JSON"));
      }
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    // A client that leaves before its body ends: nothing more comes.
    const onClose = () => {
      cleanup();
      reject(new HttpError(400, "the request ended before its body"));
    };
    const cleanup = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
  });
}
