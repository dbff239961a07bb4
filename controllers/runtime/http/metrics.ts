// GET /metrics: envd's Metrics shape. Where the view knows the sandbox's own accounting (the local
// driver's cgroups; one runtime serves many sandboxes there) memory and CPU are the sandbox's:
// memory charged and its limit, CPU time used since the previous call over the CPUs it may use.
// Otherwise (the runtime owns the whole machine or pod) they are the host's: busy share since the
// previous call, /proc/meminfo. Disk is statfs of the sandbox root either way.
import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { cpus } from "node:os";
import type { RuntimeSandbox } from "../sandbox.ts";
import { refreshAfterSnapshot } from "../snapshot-refresh.ts";
import type { SandboxUsage } from "../sandbox-view.ts";
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
// The first call's interval starts with the process, also one started from the startup snapshot.
refreshAfterSnapshot(() => void (last = cpuTimes()));

function meminfo(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of readFileSync("/proc/meminfo", "utf8").split("\n")) {
    const m = /^(\w+):\s+(\d+)/.exec(line);
    if (m) out[m[1]!] = Number(m[2]) * 1024;
  }
  return out;
}

interface Figures {
  cpuCount: number;
  cpuPct: number;
  memTotal: number;
  memUsed: number;
  memCache: number;
}

function hostFigures(): Figures {
  const now = cpuTimes();
  const dTotal = now.total - last.total;
  const cpuPct = dTotal > 0 ? ((now.busy - last.busy) / dTotal) * 100 : 0;
  last = now;
  const mem = meminfo();
  const memTotal = mem.MemTotal ?? 0;
  return { cpuCount: cpus().length, cpuPct, memTotal, memUsed: memTotal - (mem.MemAvailable ?? 0), memCache: (mem.Cached ?? 0) + (mem.Buffers ?? 0) };
}

/** Previous CPU reading per sandbox, so each sandbox's percentage covers its own interval. */
const lastUsage = new WeakMap<RuntimeSandbox, { usec: number; at: number }>();

export function sandboxFigures(sbx: RuntimeSandbox, usage: SandboxUsage, nowMs: number): Figures {
  const hostCpus = cpus().length;
  const cpuCount = usage.cpuLimit !== undefined ? Math.max(1, Math.ceil(usage.cpuLimit)) : hostCpus;
  let cpuPct = 0;
  if (usage.cpuUsageUsec !== undefined) {
    const prev = lastUsage.get(sbx);
    if (prev && nowMs > prev.at) cpuPct = Math.min(100, ((usage.cpuUsageUsec - prev.usec) / ((nowMs - prev.at) * 1000 * (usage.cpuLimit ?? hostCpus))) * 100);
    lastUsage.set(sbx, { usec: usage.cpuUsageUsec, at: nowMs });
  }
  const memTotal = usage.memLimit ?? meminfo().MemTotal ?? 0;
  return { cpuCount, cpuPct: Math.max(0, cpuPct), memTotal, memUsed: usage.memUsed, memCache: usage.memCache ?? 0 };
}

export async function getMetrics(_req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox): Promise<void> {
  const usage = sbx.view.usage?.();
  const f = usage ? sandboxFigures(sbx, usage, Date.now()) : hostFigures();
  const memTotal = f.memTotal;
  const memUsed = f.memUsed;
  // node:fs/promises is loaded at first use, not at start-up (~4 ms of CPU before /health answers).
  const fs = await process.getBuiltinModule("node:fs/promises").statfs(sbx.view.toHost("/"));
  sendJson(res, 200, {
    ts: Math.floor(Date.now() / 1000),
    cpu_count: f.cpuCount,
    cpu_used_pct: Math.round(f.cpuPct * 100) / 100,
    mem_total: memTotal,
    mem_used: memUsed,
    mem_cache: f.memCache,
    mem_total_mib: Math.floor(memTotal / 2 ** 20),
    mem_used_mib: Math.floor(memUsed / 2 ** 20),
    disk_used: (fs.blocks - fs.bfree) * fs.bsize,
    disk_total: fs.blocks * fs.bsize,
  });
}
