// Code-interpreter figures (issue 12) with the real @e2b/code-interpreter SDK against the system
// `npm start` runs, from a warm `code-interpreter-v1` pool:
//   ci.first_result_ms        Sandbox.create + the first runCode('1+1') result (the default
//                             context's kernel starts on that first cell), median of CREATES
//   ci.cell_overhead_ratio    median runCode('pass') through the SDK (edge gateway, agent ingress,
//                             runtime, kernel driver, kernel) over the same cell sent straight to a
//                             kernel with jupyter_client inside the same sandbox, the two interleaved
//                             cell by cell; taken in ROUNDS rounds of CELLS cells, the figure is the
//                             median of the rounds' ratios, its spread their lowest and highest
//                             (target ≤ 1.5)
//   ci.cell_sdk_p50_ms / ci.cell_ingress_p50_ms / ci.cell_driver_p50_ms / ci.cell_kernel_p50_ms
//                             the parts: the SDK's cell; the same request signed and sent straight
//                             to the agent's ingress (no edge gateway); the cell through our kernel
//                             driver's own line protocol (a pipe, no HTTP) and on the bare kernel,
//                             both timed inside the sandbox; so the profile says which hop costs what
//   ci.health_ingress_p50_ms  GET /health of the interpreter through the ingress: the HTTP hop's floor
//   node bench/ci.ts   prints the figures as JSON
// Needs the code-interpreter root filesystem (`node controllers/drivers/local/rootfs/cli.ts
// build-code-interpreter`, which `.ci/run` and the test tiers' setup build).
import { Sandbox } from "@e2b/code-interpreter";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { PassThrough } from "node:stream";
import { KERNEL_DRIVER_PY } from "../controllers/runtime/interpreter/kernel-driver-source.ts";
import { RootfsStore } from "../controllers/drivers/local/rootfs/store.ts";
import { startSystem } from "../scripts/lib/system.ts";
import { ingressKey, signIngress, SIGNATURE_HEADER } from "../schema/ingress/signature.ts";
import type { Figures } from "./run.ts";
import { median, round } from "./stats.ts";

const CREATES = Number(process.env.CI_BENCH_CREATES ?? 5);
const ROUNDS = Number(process.env.CI_BENCH_ROUNDS ?? 5);
const CELLS = Number(process.env.CI_BENCH_CELLS ?? 60);

// Inside the sandbox, one line per "go" on stdin: the same `pass` cell timed (a) on a kernel of its
// own through jupyter_client, executed until the kernel reports idle, as our driver does, and (b)
// through our kernel driver (the Python one the runtime runs, started as a child with its line
// protocol on a pipe), until the driver says the cell is done.
const HARNESS = String.raw`
import json, subprocess, sys, time
from jupyter_client.manager import KernelManager
km = KernelManager(kernel_name="python3"); km.start_kernel(); kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=120)
def kernel_pass():
    mid = kc.execute("pass")
    while True:
        m = kc.get_iopub_msg(timeout=30)
        if m["parent_header"].get("msg_id") == mid and m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return
drv = subprocess.Popen([sys.executable, "/tmp/e2b-bench-driver.py", "python3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
assert json.loads(drv.stdout.readline()).get("ready")
n = 0
def driver_pass():
    global n
    n += 1
    drv.stdin.write(json.dumps({"op": "execute", "id": n, "code": "pass", "env": {}}) + "\n"); drv.stdin.flush()
    while True:
        m = json.loads(drv.stdout.readline())
        if m.get("id") == n and m.get("done"):
            return
print("ready", flush=True)
for _ in sys.stdin:
    t = time.perf_counter(); kernel_pass(); k = time.perf_counter() - t
    t = time.perf_counter(); driver_pass(); d = time.perf_counter() - t
    print(json.dumps({"kernel": k * 1000, "driver": d * 1000}), flush=True)
`;

async function waitPoolWarm(apiUrl: string, apiKey: string, template: string, want: number): Promise<void> {
  const deadline = Date.now() + 600_000;
  while (Date.now() < deadline) {
    const res = await fetch(`${apiUrl}/admin/teams/admin/templates/${template}`, { headers: { "x-api-key": apiKey } });
    if (res.ok && (((await res.json()) as { pool?: { available?: number } }).pool?.available ?? 0) >= want) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`pool ${template} did not reach ${want} available members`);
}

export async function run(): Promise<Figures> {
  if (!new RootfsStore().templateTrees("code-interpreter")) throw new Error("the code-interpreter root filesystem is not built (cli.ts build-code-interpreter)");
  const dataDir = mkdtempSync(join(tmpdir(), "sbx-bench-ci-"));
  const sys = await startSystem({ dataDir, baseReplicas: 0, codeInterpreterReplicas: CREATES });
  const opts = { apiKey: sys.apiKey, apiUrl: sys.apiUrl, sandboxUrl: sys.apiUrl };
  const figures: Figures = {};
  try {
    await waitPoolWarm(sys.apiUrl, sys.apiKey, "code-interpreter-v1", CREATES);
    const firsts: number[] = [];
    for (let i = 0; i < CREATES; i++) {
      const t = performance.now();
      const sbx = await Sandbox.create(opts);
      const exec = await sbx.runCode("1+1");
      firsts.push(performance.now() - t);
      if (exec.text !== "2") throw new Error(`runCode('1+1') answered ${JSON.stringify(exec.text)}`);
      await sbx.kill();
    }
    figures["ci.first_result_ms"] = { value: round(median(firsts)), unit: "ms", spread: [round(Math.min(...firsts)), round(Math.max(...firsts))] };

    const sbx = await Sandbox.create(opts);
    try {
      await sbx.files.write("/tmp/e2b-bench-driver.py", KERNEL_DRIVER_PY);
      await sbx.files.write("/tmp/e2b-bench-harness.py", HARNESS);
      const out = new PassThrough();
      const handle = await sbx.commands.run("python3 /tmp/e2b-bench-harness.py", { background: true, stdin: true, onStdout: (d) => void out.write(d), timeoutMs: 0 });
      const lines = createInterface({ input: out })[Symbol.asyncIterator]();
      const next = async () => (await lines.next()).value as string;
      if ((await next()) !== "ready") throw new Error("the in-sandbox harness did not start");
      const inside = async () => {
        await handle.sendStdin("go\n");
        return JSON.parse(await next()) as { kernel: number; driver: number };
      };
      // The same /execute, signed as the edge signs it, straight to the agent's ingress.
      const key = await ingressKey(sys.secrets.clusterToken);
      const body = JSON.stringify({ code: "pass" });
      const viaIngress = async () => {
        const target = { sandboxId: sbx.sandboxId, port: 49999, method: "POST", pathAndQuery: "/execute" };
        const res = await fetch(`http://127.0.0.1:${sys.secrets.ingressPort}/execute`, {
          method: "POST",
          headers: { "content-type": "application/json", "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "49999", [SIGNATURE_HEADER]: await signIngress(key, target, Date.now()) },
          body,
        });
        const text = await res.text();
        if (!text.includes("end_of_execution")) throw new Error(`ingress /execute: ${res.status} ${text.slice(0, 200)}`);
      };
      // The floor of that hop: GET /health of the interpreter (no kernel), the same way.
      const healthViaIngress = async () => {
        const target = { sandboxId: sbx.sandboxId, port: 49999, method: "GET", pathAndQuery: "/health" };
        const res = await fetch(`http://127.0.0.1:${sys.secrets.ingressPort}/health`, {
          headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "49999", [SIGNATURE_HEADER]: await signIngress(key, target, Date.now()) },
        });
        if ((await res.text()) !== "OK") throw new Error(`ingress /health: ${res.status}`);
      };
      // Warm every path (the SDK's default context starts here).
      for (let i = 0; i < 10; i++) await Promise.all([sbx.runCode("pass"), inside(), viaIngress()]);
      const ingress: number[] = [];
      const health: number[] = [];
      const viaSdk: number[] = [];
      const kernel: number[] = [];
      const driver: number[] = [];
      const ratios: number[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        const roundSdk: number[] = [];
        const roundKernel: number[] = [];
        for (let i = 0; i < CELLS; i++) {
          const t = performance.now();
          const exec = await sbx.runCode("pass");
          roundSdk.push(performance.now() - t);
          if (exec.error) throw new Error(`runCode('pass'): ${exec.error.name}`);
          const t2 = performance.now();
          await viaIngress();
          ingress.push(performance.now() - t2);
          const t3 = performance.now();
          await healthViaIngress();
          health.push(performance.now() - t3);
          const k = await inside();
          roundKernel.push(k.kernel);
          driver.push(k.driver);
        }
        ratios.push(median(roundSdk) / median(roundKernel));
        viaSdk.push(...roundSdk);
        kernel.push(...roundKernel);
      }
      await handle.kill();
      const spread = (xs: number[]): [number, number] => [round(Math.min(...xs)), round(Math.max(...xs))];
      figures["ci.cell_sdk_p50_ms"] = { value: round(median(viaSdk)), unit: "ms" };
      figures["ci.cell_ingress_p50_ms"] = { value: round(median(ingress)), unit: "ms" };
      figures["ci.health_ingress_p50_ms"] = { value: round(median(health)), unit: "ms" };
      figures["ci.cell_driver_p50_ms"] = { value: round(median(driver)), unit: "ms" };
      figures["ci.cell_kernel_p50_ms"] = { value: round(median(kernel)), unit: "ms" };
      figures["ci.cell_overhead_ratio"] = { value: round(median(ratios)), unit: "ratio", target: "≤ 1.5", spread: spread(ratios) };
    } finally {
      await sbx.kill();
    }
  } finally {
    await sys.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
  return figures;
}

if (import.meta.main) console.log(JSON.stringify(await run(), null, 2));
