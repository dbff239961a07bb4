// The agent's bookkeeping per sandbox outside its driver (session 36), this checkout's code against
// a baseline checkout's, interleaved in one process (ABBA per round), as the process's CPU time
// (user + system, all threads: the intent store's fsyncs run on the thread pool). No root needed;
// scratch directories on the file system the data directory uses (BENCH_DIR, default /var/tmp).
//   node bench/agent-bookkeeping.ts <baseline checkout> [rounds]   prints the figures as JSON
// Per sandbox, in the order a cycle (create + refill, command, kill + destroy) makes them:
// - intent: a pool member's intent made durable, its claim's, the sweep (fsyncs, the superseded
//   file removed; one sweep per PER_ROUND sandboxes, as sweeps batch a second's writes), the
//   kill's delete (intent-store.ts);
// - parked: the runtime's delete of what a sandbox carried, for one that carried nothing (the
//   usual case; parked-state.ts);
// - token: the access token set at the sandbox's registration and checked on two requests
//   (sandbox.ts);
// - passwd: a sandbox's first look-up of a user, its own cache of /etc/passwd read and parsed
//   (passwd.ts; every sandbox of a template has the same text).
// Medians of the rounds with their spread, µs per sandbox.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { IntentSchema, type Intent } from "../schema/protocol/index.ts";
import { median, round } from "./stats.ts";

const baseline = process.argv[2];
if (!baseline) throw new Error("usage: node bench/agent-bookkeeping.ts <baseline checkout> [rounds]");
const ROUNDS = Number(process.argv[3] ?? 9);
const PER_ROUND = 100;
const scratch = mkdtempSync(join(process.env.BENCH_DIR ?? "/var/tmp", "agent-bookkeeping-"));

type Mods = { IntentStore: any; ParkedStates: any; RuntimeSandbox: any; cachedFile: any; parsePasswd: any };
const load = async (root: string): Promise<Mods> => {
  const at = (p: string) => import(pathToFileURL(resolve(root, p)).href);
  return { ...(await at("controllers/agent/intent-store.ts")), ...(await at("controllers/runtime/parked-state.ts")), ...(await at("controllers/runtime/sandbox.ts")), ...(await at("controllers/runtime/passwd.ts")) };
};
const sides = { before: await load(baseline), after: await load(".") };

const intentOf = (id: string, generation: number, kind: "pool" | "sandbox", state: "running" | "deleted" = "running"): Intent => IntentSchema.parse({
  sandboxId: id, generation, owner: kind === "pool" ? { kind: "pool", id: "base" } : { kind: "sandbox" }, desired: { state }, issuedAt: 0, envdAccessToken: "t".repeat(40),
  envVars: { A: "1" }, template: { id: "base", revision: "r1", image: "base", user: "user", workdir: "/home/user", resources: { cpuCount: 1, memoryMB: 256 } },
});
const passwd = join(scratch, "passwd");
writeFileSync(passwd, ["root:x:0:0:root:/root:/bin/bash", "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin", ...Array.from({ length: 20 }, (_, i) => `svc${i}:x:${100 + i}:${100 + i}::/nonexistent:/usr/sbin/nologin`), "user:x:1000:1000::/home/user:/bin/bash", ""].join("\n"));
const view = { toHost: (p: string) => p, toSandbox: (p: string) => p, lookupUser: () => undefined, command: () => { throw new Error("unused"); } };

let n = 0;
const stores = { before: new sides.before.IntentStore(join(scratch, "i-before")), after: new sides.after.IntentStore(join(scratch, "i-after")) };
const parked = { before: new sides.before.ParkedStates(join(scratch, "p-before")), after: new sides.after.ParkedStates(join(scratch, "p-after")) };
const steps = {
  async intent(which: "before" | "after") {
    const store = stores[which];
    const ids = Array.from({ length: PER_ROUND }, () => `s${++n}`);
    for (const id of ids) {
      store.offer(intentOf(id, 1, "pool"));
      store.durable(id);
      store.offer(intentOf(id, 2, "sandbox"));
      store.durable(id);
    }
    await store.settled();
    for (const id of ids) store.offer(intentOf(id, 3, "sandbox", "deleted"));
  },
  async parked(which: "before" | "after") {
    for (let i = 0; i < PER_ROUND; i++) parked[which].delete(`s${++n}`, "deleted");
  },
  async token(which: "before" | "after") {
    for (let i = 0; i < PER_ROUND; i++) {
      const s = new sides[which].RuntimeSandbox(`s${++n}`, view, { accessToken: `token-${n}` });
      if (!s.checkToken(`token-${n}`) || s.checkToken("other")) throw new Error("token check");
    }
  },
  async passwd(which: "before" | "after") {
    const m = sides[which];
    for (let i = 0; i < PER_ROUND; i++) if (m.cachedFile(() => passwd, m.parsePasswd, [])().length !== 23) throw new Error("passwd");
  },
};

const cpuUs = async (fn: () => Promise<void>): Promise<number> => {
  const t = process.cpuUsage();
  await fn();
  const d = process.cpuUsage(t);
  return d.user + d.system;
};

const samples: Record<string, number[]> = {};
try {
  for (const step of Object.keys(steps) as (keyof typeof steps)[]) for (const which of ["before", "after"] as const) await steps[step](which); // warm
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? (["before", "after", "after", "before"] as const) : (["after", "before", "before", "after"] as const);
    for (const step of Object.keys(steps) as (keyof typeof steps)[]) {
      const got = { before: 0, after: 0 };
      for (const which of order) got[which] += (await cpuUs(() => steps[step](which))) / (2 * PER_ROUND);
      for (const which of ["before", "after"] as const) (samples[`${step}_${which}`] ??= []).push(got[which]);
      const sum = (samples[`sum_${r}`] ??= [0, 0]);
      sum[0]! += got.before;
      sum[1]! += got.after;
    }
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
const figures: Record<string, { value: number; unit: string; spread: [number, number] }> = {};
const put = (name: string, xs: number[]) => (figures[`agent_bookkeeping.${name}_us_each`] = { value: round(median(xs), 1), unit: "us", spread: [round(Math.min(...xs), 1), round(Math.max(...xs), 1)] });
for (const [k, xs] of Object.entries(samples)) if (!k.startsWith("sum_")) put(k, xs);
const sums = Object.entries(samples).filter(([k]) => k.startsWith("sum_")).map(([, v]) => v);
put("sum_before", sums.map((s) => s[0]!));
put("sum_after", sums.map((s) => s[1]!));
// Paired per round (both sides of a round ran interleaved, so they share its load).
const ratios = (a: number[], b: number[]) => b.map((x, i) => x / a[i]!);
const ratio = (name: string, xs: number[]) => (figures[`agent_bookkeeping.${name}_after_vs_before_ratio`] = { value: round(median(xs), 3), unit: "ratio", spread: [round(Math.min(...xs), 3), round(Math.max(...xs), 3)] });
for (const step of Object.keys(steps)) ratio(step, ratios(samples[`${step}_before`]!, samples[`${step}_after`]!));
ratio("sum", sums.map((s) => s[1]! / s[0]!));
console.log(JSON.stringify({ rounds: ROUNDS, perRound: PER_ROUND, figures }, null, 2));
