// Runs once in Node before the workerd tier: applies the migrations to the sqld the runner
// started (LIBSQL_URL) and seeds the admin team, admin key and `base` template. Test files use
// their own team names, so they never collide. It also serves stand-in cluster ingresses: runtimes
// that answer badly (`badRuntimes`), and one for HTTP lifecycle hooks (`hookIngress`).
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { TestProject } from "vitest/node";
import { migrate } from "../../scripts/migrate.ts";
import { seed } from "../../scripts/seed.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** A stand-in ingress per kind of bad answer to `GET /metrics`, for a scripted agent's `ingressUrl`:
     * a tenant's pod runtime answers whatever it likes (review24 edge F8). */
    badRuntimes: Record<"huge" | "notJson" | "badTs", string>;
    /** A stand-in ingress for HTTP lifecycle hooks: `/ok` answers 200, anything else 500; it keeps
     * the calls, which `GET /__calls` (no sandbox header) answers as `[{sandboxId, path}]`. */
    hookIngress: string;
  }
}

const METRICS = { cpu_count: 2, cpu_used_pct: 1, mem_used: 1, mem_total: 2, disk_used: 1, disk_total: 2 };
const ANSWERS: Record<"huge" | "notJson" | "badTs", () => string> = {
  // A valid sample padded past any sane bound (8 MiB).
  huge: () => JSON.stringify({ ...METRICS, ts: Math.floor(Date.now() / 1000), pad: "x".repeat(8 << 20) }),
  notJson: () => "<html>not metrics</html>",
  badTs: () => JSON.stringify({ ...METRICS, ts: "now" }),
};

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const url = process.env.LIBSQL_URL ?? "http://127.0.0.1:8080";
  await migrate(url);
  await seed({ libsqlUrl: url, adminApiKey: "e2b_00000000000000000000000000000000000000ad", pepper: "test-pepper", baseReplicas: 0 });
  const servers = await Promise.all(
    Object.entries(ANSWERS).map(async ([kind, answer]) => {
      const server = createServer((_req, res) => res.writeHead(200, { "content-type": "application/json" }).end(answer()));
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      return [kind, server] as const;
    }),
  );
  const hookCalls: { sandboxId: string; path: string }[] = [];
  const hooks = createServer((req, res) => {
    const sandboxId = req.headers["e2b-sandbox-id"];
    if (typeof sandboxId !== "string") return res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(hookCalls));
    hookCalls.push({ sandboxId, path: req.url ?? "" });
    res.writeHead(req.url === "/ok" ? 200 : 500).end();
  });
  await new Promise<void>((resolve) => hooks.listen(0, "127.0.0.1", resolve));
  project.provide("hookIngress", `http://127.0.0.1:${(hooks.address() as AddressInfo).port}`);
  project.provide("badRuntimes", Object.fromEntries(servers.map(([kind, s]) => [kind, `http://127.0.0.1:${(s.address() as AddressInfo).port}`])) as Record<"huge" | "notJson" | "badTs", string>);
  return async () => {
    for (const [, s] of servers) s.close();
    hooks.close();
  };
}
