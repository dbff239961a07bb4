// A POST to a tenant-reachable endpoint (a pod's runtime: the agent's /init) through node:http with
// a kept-alive agent. undici's WHATWG fetch, which sent it before, builds Request, Headers, Response
// and a web stream per call and an AbortSignal timer: with 50 claims at once that was a good part of
// the agent's CPU per claim (bench/kube.ts, s14's profile), for a request whose answer is a status.
// As in `boundedGet`: a redirect is never followed (node:http does not follow; a 3xx is an answer
// that is not 2xx: following would send the agent's POST, with the sandbox's token, from its
// network position to a URL the tenant picked), and the answer is the tenant's data, so its body
// is read only up to a size and the whole exchange within a time.
import http from "node:http";
import https from "node:https";

/** Connections kept per runtime address: a runtime's /inits reuse one (in a cluster each pod has
 * its own; the server's keep-alive bound closes the idle ones). Looked up on the module object
 * (`http.request`) at each call so an instrument (bench/kube-agent.ts) can wrap it. */
const AGENTS = { "http:": new http.Agent({ keepAlive: true }), "https:": new https.Agent({ keepAlive: true }) } as const;

export interface PostAnswer {
  status: number;
  /** The body of an answer that is not 2xx, its first `maxBytes` (a 2xx body is drained unread). */
  text: string;
}

/** POSTs `body`; resolves with the status once the answer is read (refused past `timeoutMs`). */
export function boundedPost(url: URL, headers: Record<string, string>, body: string, o: { maxBytes: number; timeoutMs: number }): Promise<PostAnswer> {
  const lib = url.protocol === "https:" ? https : url.protocol === "http:" ? http : undefined;
  if (!lib) return Promise.reject(new Error(`unsupported protocol ${url.protocol}`));
  return new Promise<PostAnswer>((resolve, reject) => {
    const settle = (err?: Error, answer?: PostAnswer) => {
      clearTimeout(timer);
      if (err) reject(err);
      else resolve(answer!);
    };
    const req = lib.request(url, { method: "POST", agent: AGENTS[url.protocol as "http:" | "https:"], headers: { ...headers, "content-length": String(Buffer.byteLength(body)) } }, (res) => {
      const status = res.statusCode ?? 0;
      res.on("error", (err) => settle(err));
      if (status >= 200 && status < 300) {
        // Answered: drained unread so the connection is kept; the timer still ends an endless body.
        resolve({ status, text: "" });
        res.on("end", () => clearTimeout(timer));
        res.resume();
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (chunk: Buffer) => {
        if (size >= o.maxBytes) return;
        chunks.push(chunk.subarray(0, o.maxBytes - size));
        size += Math.min(chunk.byteLength, o.maxBytes - size);
        if (size < o.maxBytes) return;
        // Enough for the message: the rest is not waited for (nor the connection reused).
        settle(undefined, { status, text: Buffer.concat(chunks).toString("utf8") });
        req.destroy();
      });
      res.on("end", () => settle(undefined, { status, text: Buffer.concat(chunks).toString("utf8") }));
    });
    const timer = setTimeout(() => req.destroy(new Error(`no answer within ${o.timeoutMs} ms`)), o.timeoutMs);
    req.on("error", (err) => settle(err));
    req.end(body);
  });
}
