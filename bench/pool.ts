// Pool autoscaling on the edge (workerd + sqld, the scripted agent):
//   pool.autoscale_reaction_s  a claim burst (every warm member claimed at once) to the
//                              autoscaler's scale-up decision (`lastScaleTime`), median of rounds,
//                              each on a fresh pool. Target: ≤ 1 cooldown (scaleUp window) + 1 s.
// The agent reports members ready only when told, so the burst's refills stay "creating" and
// the drained stock is what the autoscaler sees (a fast agent could refill before it looks).
import { migrate } from "../scripts/migrate.ts";
import { seed } from "../scripts/seed.ts";
import { ScriptedAgent, tcpTransport } from "../test/support/scripted-agent.ts";
import type { BenchContext, Figures } from "./run.ts";
import { median } from "./stats.ts";

const ADMIN_KEY = `e2b_${"0".repeat(38)}be`;
const CLUSTER_TOKEN = "bench-cluster-token";
const ROUNDS = 5;
const WARM = 4;
const COOLDOWN_S = 5;

export async function run(ctx: BenchContext): Promise<Figures> {
  await migrate(ctx.libsqlUrl);
  await seed({ libsqlUrl: ctx.libsqlUrl, adminApiKey: ADMIN_KEY, pepper: "bench-pepper", baseReplicas: 0 });
  const edge = await ctx.startEdge({ vars: { LIBSQL_URL: ctx.libsqlUrl, KEY_PEPPER: "bench-pepper", ADMIN_API_KEY: ADMIN_KEY, CLUSTER_TOKEN } });
  const agent = new ScriptedAgent({ agentId: "bench-pool", observe: false });
  await agent.connect(tcpTransport(edge.url, CLUSTER_TOKEN, "local"));
  const json = async (path: string, init: RequestInit = {}): Promise<any> => {
    const res = await fetch(`${edge.url}${path}`, { ...init, headers: { "x-api-key": ADMIN_KEY, "content-type": "application/json" } });
    const text = await res.text();
    if (res.status >= 300) throw new Error(`${init.method ?? "GET"} ${path}: HTTP ${res.status} ${text.slice(0, 300)}`);
    return text ? JSON.parse(text) : null;
  };
  const readyAll = () => {
    for (const id of agent.running()) {
      const s = agent.sandboxes.get(id)!;
      if (s.intent.owner.kind === "pool") agent.report({ sandboxId: id, generation: s.generation, phase: "Running", ready: true, endpoint: { runtime: `http://${id}.bench.invalid:49983` }, revision: s.intent.template?.revision, observedAt: Date.now() });
    }
  };
  const until = async (check: () => Promise<boolean>, what: string) => {
    const end = Date.now() + 60_000;
    while (!(await check())) {
      if (Date.now() > end) throw new Error(`bench pool: timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const reactions: number[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const tpl = `/admin/teams/admin/templates/auto-${round}`;
      await json(tpl, { method: "PUT", body: JSON.stringify({ spec: { replicas: WARM } }) });
      await until(async () => {
        readyAll();
        return (await json(tpl)).pool.available === WARM;
      }, "the warm pool");
      const spec = { maxReplicas: 50, capacityPolicy: { targetAvailable: WARM, tolerance: 0, scaleUp: { stabilizationWindowSeconds: COOLDOWN_S } } };
      await json(`${tpl}/autoscaler`, { method: "PUT", body: JSON.stringify(spec) });
      const started = Date.now();
      await Promise.all(Array.from({ length: WARM }, () => json("/sandboxes", { method: "POST", body: JSON.stringify({ templateID: `auto-${round}`, timeout: 600 }) })));
      let scaledAt = 0;
      await until(async () => {
        const s = await json(`${tpl}/autoscaler`);
        scaledAt = s.lastScaleTime ? Date.parse(s.lastScaleTime) : 0;
        return scaledAt > 0;
      }, "the scale-up");
      reactions.push((scaledAt - started) / 1000);
    }
  } finally {
    agent.disconnect();
    await edge.stop();
  }
  console.error(`bench pool: autoscale reactions ${reactions.map((r) => r.toFixed(2)).join(", ")} s (scaleUp window ${COOLDOWN_S} s, sampling 5 s)`);
  return { "pool.autoscale_reaction_s": { value: median(reactions), unit: "s", target: `<= ${COOLDOWN_S + 1} (1 cooldown + 1 s)` } };
}
