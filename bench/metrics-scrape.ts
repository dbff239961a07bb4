// obs.metrics_scrape_ms: one scrape of the agent's /metrics (over HTTP, as Prometheus scrapes) with
// 10,000 sandboxes known to its reconciler and registered with its runtime. The driver is a stub
// that reports every sandbox Running at once: what is measured is the scrape, not the sandboxes.
//   node bench/metrics-scrape.ts [--sandboxes 10000] [--scrapes 30]
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { IntentStore } from "../controllers/agent/intent-store.ts";
import { startMetricsServer } from "../controllers/agent/metrics-server.ts";
import { Reconciler } from "../controllers/agent/reconciler.ts";
import type { DesiredSandbox, Driver, SandboxObservation } from "../controllers/drivers/driver.ts";
import { configureLogs } from "../controllers/lib/log.ts";
import { observeRuntimeProcesses, observeSandboxStates } from "../controllers/lib/metrics.ts";
import { createRuntime } from "../controllers/runtime/runtime.ts";
import type { SandboxView } from "../controllers/runtime/sandbox-view.ts";
import { IntentSchema } from "../schema/protocol/index.ts";
import { median } from "./stats.ts";

const { values: opt } = parseArgs({ options: { sandboxes: { type: "string", default: "10000" }, scrapes: { type: "string", default: "30" } } });
const n = Number(opt.sandboxes);
configureLogs({ write: () => {} });

const running = new Map<string, SandboxObservation>();
const driver = {
  name: "stub",
  capabilities: { level: "process", hostView: true, notes: [] },
  async ensure(d: DesiredSandbox) {
    const o = { id: d.id, generation: d.generation, phase: "Running", level: "process", createdAt: new Date(0).toISOString(), enforced: { cpu: false, memory: false, pids: false, network: false } } as SandboxObservation;
    running.set(d.id, o);
    return o;
  },
  async observe(id: string) {
    return running.get(id);
  },
  async list() {
    return [...running.values()];
  },
  view: () => ({}) as SandboxView,
  async destroy(id: string) {
    running.delete(id);
  },
} as unknown as Driver;

const dir = mkdtempSync("/dev/shm/sbx-scrape-");
const runtime = createRuntime({ onError: () => {} });
const reconciler = new Reconciler({ store: new IntentStore(dir), driver, runtime, report: () => {}, settled: () => {} });
try {
  for (let i = 0; i < n; i++) {
    const owner = i % 4 ? { kind: "sandbox" as const } : { kind: "pool" as const, id: "base" };
    reconciler.offer(IntentSchema.parse({ sandboxId: `s${i}`, generation: 1, owner, desired: { state: "running" }, template: { id: "base", revision: "r1", image: "base", user: "user", workdir: "/home/user", resources: { cpuCount: 1, memoryMB: 256 } }, issuedAt: 0 }));
  }
  await reconciler.queue.idle();
  observeSandboxStates(() => reconciler.phaseCounts());
  observeRuntimeProcesses(() => runtime.processCount());
  const server = await startMetricsServer(0);
  const times: number[] = [];
  const cpu: number[] = [];
  let text = "";
  for (let i = 0; i < Number(opt.scrapes); i++) {
    const t = performance.now();
    const c = process.cpuUsage();
    text = await (await fetch(server.url)).text();
    times.push(performance.now() - t);
    const used = process.cpuUsage(c);
    cpu.push((used.user + used.system) / 1000);
  }
  await server.close();
  const sandboxes = text.split("\n").filter((l) => l.startsWith("sandbox_agent_sandboxes{")).join(", ");
  console.log(`${n} sandboxes (${sandboxes})`);
  console.log(`obs.metrics_scrape_ms ${median(times).toFixed(2)} (median of ${times.length}; min ${Math.min(...times).toFixed(2)}, max ${Math.max(...times).toFixed(2)})`);
  // The process's CPU per scrape (server and client share it): steadier than the wall time on a loaded machine.
  console.log(`process CPU ms per scrape ${median(cpu).toFixed(2)} (median; min ${Math.min(...cpu).toFixed(2)}, max ${Math.max(...cpu).toFixed(2)})`);
} finally {
  reconciler.queue.close();
  await runtime.close();
  rmSync(dir, { recursive: true, force: true });
}
