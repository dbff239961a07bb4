// The isolation floor's rounds (isolation-floor.sh says what one round does): the CPU of making,
// entering once and destroying one sandbox as isolated as the local driver's, by a plain script
// with the same tools. Benches run it interleaved with the driver's own rounds
// (`local.isolation_floor_cpu_ms_each` beside `local.driver_cpu_ms_each`). Needs root, the
// template `base` built, and a driver of this host having opened the bridge (SandboxNet).
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { detectCgroups, removeParents, type CgroupLayout } from "../controllers/drivers/local/cgroups.ts";
import { RootfsStore } from "../controllers/drivers/local/rootfs/store.ts";
import { SandboxNet } from "../controllers/drivers/local/sandbox-net.ts";
import { RANGE_SIZE } from "../controllers/drivers/local/uid-range.ts";

const SCRIPT = fileURLToPath(new URL("./isolation-floor.sh", import.meta.url));

/** `times`' "0m0.045s 0m0.018s" as ms (user + system). */
function timesMs(line: string): number {
  return line
    .trim()
    .split(/\s+/)
    .reduce((sum, t) => {
      const m = /^(\d+)m([\d.]+)s$/.exec(t);
      if (!m) throw new Error(`isolation floor: unexpected times output ${JSON.stringify(line)}`);
      return sum + (Number(m[1]) * 60 + Number(m[2])) * 1000;
    }, 0);
}

export class IsolationFloor {
  readonly #dir: string;
  readonly #cgroups: CgroupLayout;
  readonly #net: SandboxNet;
  readonly #layers: string[];
  readonly #address: string;
  readonly #record: string;
  #seq = 0;

  readonly #userns: boolean;

  /** `userns`: as a driver with user namespaces makes them (false: as one without, see
   * LocalDriver's capability notes). */
  constructor(opts: { parent?: string; template?: string; userns?: boolean } = {}) {
    const { parent = tmpdir(), template = "base", userns = true } = opts;
    this.#userns = userns;
    this.#dir = mkdtempSync(join(parent, "bench-floor-"));
    // bwrap starts as the range's owner, an unprivileged uid, and must pass to the root it binds.
    chmodSync(this.#dir, 0o711);
    const store = new RootfsStore();
    const t = store.template(template);
    if (!t || t.layers.length === 0) throw new Error(`isolation floor: template ${template} is not built in ${store.root}`);
    this.#layers = t.layers.map((id) => store.layerTree(id));
    const cg = detectCgroups(`kruise-bench-${process.pid}-floor`);
    if (!cg.layout) throw new Error(`isolation floor: ${cg.reason}`);
    this.#cgroups = cg.layout;
    const net = SandboxNet.open();
    if (typeof net === "string") throw new Error(`isolation floor: no sandbox network: ${net}`);
    this.#net = net;
    // An address leased as the driver leases them, held by a record naming it.
    this.#record = join(this.#dir, "record.json");
    writeFileSync(this.#record, "{}");
    this.#address = net.lease(this.#record);
    writeFileSync(this.#record, JSON.stringify({ net: { address: this.#address } }));
  }

  /** Each step's CPU (ms) of the last round when FLOOR_STEPS is set (isolation-floor.sh `step`). */
  steps: Record<string, number> = {};

  /** One sandbox made, entered once and destroyed; its CPU in ms (the script and every process it ran). */
  round(): number {
    const id = `floor${process.pid}x${this.#seq++}`;
    const prefix = this.#net.subnet.split("/")[1];
    // The top uid slot, which no lease hands out (as the driver's own probe uses it).
    const base = this.#userns ? 2 ** 32 - 2 - RANGE_SIZE : 0;
    const parents = [this.#cgroups.coreParent, ...Object.values(this.#cgroups.v1Parents)];
    mkdirSync(this.#dir, { recursive: true });
    const r = spawnSync("/bin/bash", [...(process.env.FLOOR_TRACE ? ["-x"] : []), SCRIPT, this.#dir, id, this.#layers.join(":"), String(base), this.#net.bridge, `${this.#address}/${prefix}`, this.#net.gateway, ...parents], {
      encoding: "utf8",
      timeout: 60_000,
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", ...(process.env.FLOOR_STEPS ? { FLOOR_STEPS: "1" } : {}) },
    });
    const lines = r.stdout.trim().split("\n");
    if (r.status !== 0 || lines.length < 2) throw new Error(`isolation floor failed (${r.error?.message ?? r.status}): ${r.stderr.slice(-1500)}`);
    if (process.env.FLOOR_STEPS) {
      const err = r.stderr.split("\n");
      let before = 0;
      for (let i = 0; i + 2 < err.length; i++) {
        const m = /^step (\S+)$/.exec(err[i]!);
        if (!m) continue;
        const now = timesMs(err[i + 1]!) + timesMs(err[i + 2]!);
        this.steps[m[1]!] = now - before;
        before = now;
      }
    }
    return timesMs(lines.at(-2)!) + timesMs(lines.at(-1)!);
  }

  dispose(): void {
    this.#net.release(this.#address, this.#record);
    removeParents(this.#cgroups);
    // Never through a mount: a failed round may leave one (then the directory stays).
    if (!readFileSync("/proc/self/mounts", "utf8").includes(` ${this.#dir}/`)) rmSync(this.#dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const floor = new IsolationFloor({ userns: process.env.FLOOR_USERNS !== "off" });
  try {
    const steps: Record<string, number[]> = {};
    const xs = Array.from({ length: Number(process.argv[2] ?? 10) }, () => {
      const x = floor.round();
      for (const [k, v] of Object.entries(floor.steps)) (steps[k] ??= []).push(v);
      return x;
    });
    const med = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!;
    console.log(JSON.stringify({ floor_cpu_ms: xs.map((x) => Math.round(x * 10) / 10), step_medians_ms: Object.fromEntries(Object.entries(steps).map(([k, v]) => [k, med(v)])) }));
  } catch (err) {
    console.error(err);
  } finally {
    floor.dispose();
  }
}
