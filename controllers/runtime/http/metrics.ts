// GET /metrics: envd's Metrics shape. CPU is the busy share since the previous call (or since
// the runtime started), memory from /proc/meminfo, disk from statfs of the sandbox root.
import { statfs } from "node:fs/promises";
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { cpus } from "node:os";
import type { RuntimeSandbox } from "../sandbox.ts";
import { sendJson } from "./respond.ts";

function cpuTimes(): { busy: number; total: number } {
  let busy = 0;
  let total = 0;
  for (const c of cpus()) {
    const t = c.times;
    const all = t.user + t.nice + t.sys + t.idle + t.irq;
    total += all;
    busy += all - t.idle;
  }
  return { busy, total };
}

let last = cpuTimes();

function meminfo(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of readFileSync("/proc/meminfo", "utf8").split("\n")) {
    const m = /^(\w+):\s+(\d+)/.exec(line);
    if (m) out[m[1]!] = Number(m[2]) * 1024;
  }
  return out;
}

export async function getMetrics(_req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox): Promise<void> {
  const now = cpuTimes();
  const dTotal = now.total - last.total;
  const pct = dTotal > 0 ? ((now.busy - last.busy) / dTotal) * 100 : 0;
  last = now;
  const mem = meminfo();
  const memTotal = mem.MemTotal ?? 0;
  const memUsed = memTotal - (mem.MemAvailable ?? 0);
  const fs = await statfs(sbx.view.toHost("/"));
  sendJson(res, 200, {
    ts: Math.floor(Date.now() / 1000),
    cpu_count: cpus().length,
    cpu_used_pct: Math.round(pct * 100) / 100,
    mem_total: memTotal,
    mem_used: memUsed,
    mem_cache: (mem.Cached ?? 0) + (mem.Buffers ?? 0),
    mem_total_mib: Math.floor(memTotal / 2 ** 20),
    mem_used_mib: Math.floor(memUsed / 2 ** 20),
    disk_used: (fs.blocks - fs.bfree) * fs.bsize,
    disk_total: fs.blocks * fs.bsize,
  });
}
