// Drives the runtime with the real e2b SDK. The runtime runs in multi-sandbox mode, exactly as
// the agent embeds it; a minimal control plane (the only fake, at the boundary that is another
// issue) answers the SDK's create/connect/kill calls and registers each sandbox with the runtime
// the way the local driver will: HostView, default user `user`, a fresh access token.
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Sandbox, type SandboxOpts } from "e2b";
import { afterAll, beforeAll } from "vitest";
import { HostView } from "../../../controllers/runtime/host-view.ts";
import { createRuntime, type Runtime } from "../../../controllers/runtime/runtime.ts";
import { ENVD_VERSION } from "../../../controllers/runtime/version.ts";
import { ensureTestUser } from "./test-user.ts";

export const API_KEY = `e2b_${"0".repeat(40)}`;

export interface Harness {
  runtime: Runtime;
  runtimeUrl: string;
  apiUrl: string;
  /** Sandbox.create against the fake control plane; killed in close(). */
  create(opts?: SandboxOpts): Promise<Sandbox>;
  close(): Promise<void>;
}

function url(server: Server): string {
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

export async function startHarness(): Promise<Harness> {
  ensureTestUser();
  const runtime = createRuntime();
  const runtimeServer = await runtime.listen({ port: 0, host: "127.0.0.1" });
  const runtimeUrl = url(runtimeServer);
  const created = new Map<string, { token: string }>();

  const api = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : {};
    const reply = (status: number, json: unknown) => {
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(json));
    };
    const sandboxJson = (id: string) => ({ sandboxID: id, templateID: "base", clientID: "test", envdVersion: ENVD_VERSION, envdAccessToken: created.get(id)!.token, domain: null });
    const path = new URL(req.url ?? "/", "http://x").pathname;
    let m: RegExpExecArray | null;
    if (req.method === "POST" && (path === "/v2/sandboxes" || path === "/sandboxes")) {
      const id = randomBytes(10).toString("hex");
      const token = randomBytes(16).toString("hex");
      created.set(id, { token });
      runtime.addSandbox(id, new HostView(), { accessToken: token, envVars: body.envVars ?? {}, defaultUser: "user", defaultWorkdir: "/home/user" });
      return reply(201, sandboxJson(id));
    }
    if (req.method === "POST" && (m = /^(?:\/v2)?\/sandboxes\/(\w+)\/connect$/.exec(path))) {
      return runtime.getSandbox(m[1]!) ? reply(200, sandboxJson(m[1]!)) : reply(404, { code: 404, message: "not found" });
    }
    if (req.method === "DELETE" && (m = /^\/sandboxes\/(\w+)$/.exec(path))) {
      return runtime.removeSandbox(m[1]!) ? res.writeHead(204).end() : reply(404, { code: 404, message: "not found" });
    }
    reply(404, { code: 404, message: `fake control plane has no ${req.method} ${path}` });
  });
  await new Promise<void>((r) => api.listen(0, "127.0.0.1", r));
  const apiUrl = url(api);
  const sandboxes: Sandbox[] = [];

  return {
    runtime,
    runtimeUrl,
    apiUrl,
    async create(opts) {
      const sbx = await Sandbox.create("base", { apiKey: API_KEY, apiUrl, sandboxUrl: runtimeUrl, ...opts });
      sandboxes.push(sbx);
      return sbx;
    },
    async close() {
      await Promise.all(sandboxes.map((s) => s.kill().catch(() => {})));
      await new Promise<void>((r) => api.close(() => r()));
      await runtime.close();
    },
  };
}

export interface SandboxFixture {
  h: Harness;
  sbx: Sandbox;
  /** A fresh directory under /home/user, removed afterwards, so parallel runs do not collide. */
  dir: string;
}

/** Registers beforeAll/afterAll for one harness, one sandbox and a scratch directory; the
 * returned object is filled in before the first test runs. */
export function useSandboxWithDir(prefix: string): SandboxFixture {
  const f = {} as SandboxFixture;
  beforeAll(async () => {
    f.h = await startHarness();
    f.sbx = await f.h.create();
    f.dir = `/home/user/${prefix}-${randomBytes(4).toString("hex")}`;
    await f.sbx.files.makeDir(f.dir);
  });
  afterAll(async () => {
    await f.sbx?.files.remove(f.dir);
    await f.h?.close();
  });
  return f;
}
