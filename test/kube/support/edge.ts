// The real edge for kube-tier tests: sqld (migrated, admin key seeded) and the Worker on workerd.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { clusterTokenFor } from "../../../schema/protocol/cluster-token.ts";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEdge } from "../../../scripts/lib/edge.ts";
import { startSqld } from "../../../scripts/lib/sqld.ts";
import { migrate } from "../../../scripts/migrate.ts";
import { seed } from "../../../scripts/seed.ts";

export interface TestEdge {
  url: string;
  adminKey: string;
  /** The edge's CLUSTER_TOKEN (the root); an agent gets `tokenOf(its cluster)`. */
  clusterToken: string;
  tokenOf(cluster: string): Promise<string>;
  /** Binds team `team` to `cluster` through the admin API, as k8s/README.md's install does (the
   * team is created first, with a key, when missing). */
  bind(team: string, cluster: string): Promise<void>;
  /** Scratch folder removed by stop() (agents may keep their data dir here). */
  dir: string;
  stop(): Promise<void>;
}

async function bindTeam(url: string, adminKey: string, team: string, cluster: string): Promise<void> {
  const headers = { "x-api-key": adminKey, "content-type": "application/json" };
  const put = () => fetch(`${url}/admin/teams/${team}/clusters/${cluster}`, { method: "PUT", headers });
  let res = await put();
  if (res.status === 404) {
    const key = await fetch(`${url}/api-keys`, { method: "POST", headers, body: JSON.stringify({ name: `${team}-bind`, teamName: team }) });
    if (key.status !== 201) throw new Error(`creating team ${team}: ${key.status} ${await key.text()}`);
    res = await put();
  }
  if (res.status !== 200 && res.status !== 201) throw new Error(`binding team ${team} to cluster ${cluster}: ${res.status} ${await res.text()}`);
}

/** `tmpfs`: storage on /dev/shm (benchmarks: a Durable Object commit then costs what SQLite costs,
 * not an fsync of a disk other processes share). */
/** `vars`: more of the Worker's variables (e.g. OTEL_EXPORTER_OTLP_ENDPOINT). */
export async function startTestEdge(name: string, opts: { tmpfs?: boolean; vars?: Record<string, string> } = {}): Promise<TestEdge> {
  const dir = mkdtempSync(join(opts.tmpfs && existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), `sbx-kube-${name}-`));
  const adminKey = `e2b_${Buffer.from(name.padEnd(20, "x").slice(0, 20)).toString("hex")}`;
  const clusterToken = `${name}-cluster-token`;
  const pepper = `${name}-pepper`;
  const sqld = await startSqld({ dir: join(dir, "sqld") });
  try {
    await migrate(sqld.url);
    await seed({ libsqlUrl: sqld.url, adminApiKey: adminKey, pepper, baseReplicas: 0 });
    const edge = await startEdge({ dir: join(dir, "edge"), vars: { LIBSQL_URL: sqld.url, KEY_PEPPER: pepper, ADMIN_API_KEY: adminKey, CLUSTER_TOKEN: clusterToken, ...opts.vars } });
    return {
      url: edge.url,
      adminKey,
      clusterToken,
      tokenOf: (cluster) => clusterTokenFor(clusterToken, cluster),
      bind: (team, cluster) => bindTeam(edge.url, adminKey, team, cluster),
      dir,
      async stop() {
        await edge.stop();
        await sqld.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await sqld.stop();
    throw err;
  }
}
