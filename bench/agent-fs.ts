// The agent's own file-system work per new sandbox, before and after issue 16's cuts, measured
// interleaved in one run as the process's CPU time (user + system; wall time on a shared machine
// counts the other tenants). No root needed: each step is the exact sequence of calls the agent
// makes for a new sandbox, on a scratch directory of the file system the data directory uses.
//   node bench/agent-fs.ts [rounds]     prints the figures as JSON
// - mount: mountRoot's and unmountRoot's look for mounts below `layers` of a sandbox whose root
//   was never mounted or has only symbolic links there (before: a read of /proc/self/mountinfo
//   each, O(mounts on the host));
// - record: a new sandbox's three record writes (create + refill): before (records.ts up to
//   b1d5c270), each a tmp file and a rename (a new inode and a freed one per write); after,
//   records.ts's one file of two slots, made at the first write and overwritten in place (on ext4
//   without a journal each new inode scans those freed in the last minute: the cleanup between
//   rounds frees as a destroy does);
// - intent: a new sandbox's intent stored and forgotten as intent-store.ts did (tmp + rename +
//   unlink) against creating it in place (+ unlink): no CPU resolved here alone; session 36 took
//   it with other cuts (bench/agent-bookkeeping.ts measures the store's whole lifecycle);
// - rewrite: an intent rewritten (a claim over the pool member's intent, then a pause) as the store
//   did (tmp + rename over the file: ext4's auto_da_alloc flushes the new data, and the agent's
//   event loop waits for it while the sandboxes' disks are being written) against what it does
//   from then to session 35 (tmp + rename to a name of its own + unlink of the previous file;
//   since session 36 created under that name, no tmp); also as wall time
//   (agent_fs.rewrite_*_wall_us_each), which is where that wait shows.
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { forgetRecord, writeRecord, type SandboxRecord } from "../controllers/drivers/local/records.ts";
import { mountsUnder } from "../controllers/drivers/local/userns.ts";
import { IntentSchema, type Intent } from "../schema/protocol/index.ts";
import { round } from "./stats.ts";

const ROUNDS = Number(process.argv[2] ?? 20);
const PER_ROUND = 200;
const dir = mkdtempSync(join(process.env.BENCH_DIR ?? "/var/tmp", "agent-fs-"));

const cpuMs = (fn: () => void): number => {
  const t = process.cpuUsage();
  fn();
  const d = process.cpuUsage(t);
  return (d.user + d.system) / 1000;
};

// unmountUnder(dir) with nothing mounted below is mountsUnder(dir) and no helper.
const mount = {
  before(i: number) {
    const links = join(dir, `m${i}`, "layers");
    mkdirSync(join(dir, `m${i}`));
    mountsUnder(links); // mountRoot: unmountUnder(links)
    rmSync(links, { recursive: true, force: true });
    mkdirSync(links);
    symlinkSync("/nonexistent-layer", join(links, "0"));
    mountsUnder(links); // unmountRoot: unmountUnder(layers)
  },
  after(i: number) {
    const links = join(dir, `m${i}`, "layers");
    mkdirSync(join(dir, `m${i}`));
    if (lstatSync(links, { throwIfNoEntry: false })) throw new Error("not fresh");
    mkdirSync(links);
    symlinkSync("/nonexistent-layer", join(links, "0"));
    if (readdirSync(links, { withFileTypes: true }).some((e) => !e.isSymbolicLink())) mountsUnder(links);
  },
  cleanup(i: number) {
    rmSync(join(dir, `m${i}`), { recursive: true, force: true });
  },
};

// A new rooted sandbox's record as it stands once its holder runs (~1 KB of JSON).
const record = (id: string, generation: number): SandboxRecord => ({
  id, generation, level: "bwrap+cgroup", createdAt: new Date(0).toISOString(), phase: "Running",
  desired: { id, generation, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 256, diskSizeMB: 512 }, allowInternetAccess: true },
  disk: { sizeMB: 512 }, root: { image: "base", layers: ["3f1c2a9e8b7d6c5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a10"] },
  userns: { base: 1048576, size: 65536 }, sharesHostNet: false, net: { address: "10.88.0.17" },
  cgroups: { core: `/sys/fs/cgroup/kruise-4e1d0ff2ccc4/${id}`, v1: {} },
  holder: { pid: 123456, start: "987654321" }, nsInit: { pid: 123457, start: "987654322" },
});
const records = {
  before(i: number) {
    const d = join(dir, `r${i}`);
    mkdirSync(d);
    for (let w = 0; w < 3; w++) {
      const file = join(d, "record.json");
      writeFileSync(`${file}.${process.pid}.tmp`, JSON.stringify(record(`sbx${i}`, w)), { mode: 0o600 });
      renameSync(`${file}.${process.pid}.tmp`, file);
    }
  },
  after(i: number) {
    const d = join(dir, `r${i}`);
    mkdirSync(d);
    for (let w = 0; w < 3; w++) writeRecord(join(d, "record.json"), record(`sbx${i}`, w));
  },
  cleanup(i: number) {
    rmSync(join(dir, `r${i}`), { recursive: true, force: true });
    forgetRecord(join(dir, `r${i}`, "record.json"));
  },
};

const intentDir = join(dir, "intents");
mkdirSync(intentDir, { mode: 0o700 });
const intentOf = (id: string): Intent => IntentSchema.parse({
  sandboxId: id, generation: 2, owner: { kind: "sandbox" }, desired: { state: "running" }, issuedAt: 0,
  template: { id: "base", revision: "r1", image: "base", user: "user", workdir: "/home/user", resources: { cpuCount: 1, memoryMB: 256 } },
});
const intents = {
  before(i: number) {
    const intent = intentOf(`b${i}`);
    const file = join(intentDir, `b${i}.json`);
    writeFileSync(`${file}.tmp`, JSON.stringify(intent), { mode: 0o600 });
    renameSync(`${file}.tmp`, file);
    rmSync(file, { force: true });
  },
  // The candidate measured here: a first intent created in place (taken in session 36).
  after(i: number) {
    const file = join(intentDir, `a${i}.json`);
    writeFileSync(file, JSON.stringify(intentOf(`a${i}`)), { mode: 0o600, flag: "wx" });
    rmSync(file, { force: true });
  },
};

let seq = 0;
const rewrites = {
  before(i: number) {
    const file = join(intentDir, `r${i}.json`);
    for (let g = 0; g < 3; g++) {
      writeFileSync(`${file}.tmp`, JSON.stringify(intentOf(`r${i}`)), { mode: 0o600 });
      renameSync(`${file}.tmp`, file);
    }
    rmSync(file, { force: true });
  },
  after(i: number) {
    let prev: string | undefined;
    for (let g = 0; g < 3; g++) {
      const file = join(intentDir, `r${i}.${++seq}.json`);
      writeFileSync(`${file}.tmp`, JSON.stringify(intentOf(`r${i}`)), { mode: 0o600 });
      renameSync(`${file}.tmp`, file);
      if (prev) rmSync(prev, { force: true });
      prev = file;
    }
    rmSync(prev!, { force: true });
  },
};

const sums: Record<string, number> = { mount_before: 0, mount_after: 0, record_before: 0, record_after: 0, intent_before: 0, intent_after: 0, rewrite_before: 0, rewrite_after: 0, rewrite_before_wall: 0, rewrite_after_wall: 0 };
try {
  for (let r = 0; r < ROUNDS; r++) {
    // Alternate which goes first so a drift within a round falls on both.
    const order = r % 2 === 0 ? (["before", "after"] as const) : (["after", "before"] as const);
    for (const which of order) {
      sums[`mount_${which}`]! += cpuMs(() => { for (let i = 0; i < PER_ROUND; i++) mount[which](i); });
      for (let i = 0; i < PER_ROUND; i++) mount.cleanup(i);
      sums[`record_${which}`]! += cpuMs(() => { for (let i = 0; i < PER_ROUND; i++) records[which](i); });
      for (let i = 0; i < PER_ROUND; i++) records.cleanup(i);
      sums[`intent_${which}`]! += cpuMs(() => { for (let i = 0; i < PER_ROUND; i++) intents[which](i); });
      const t = performance.now();
      sums[`rewrite_${which}`]! += cpuMs(() => { for (let i = 0; i < PER_ROUND; i++) rewrites[which](i); });
      sums[`rewrite_${which}_wall`]! += performance.now() - t;
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
const n = ROUNDS * PER_ROUND;
const each = Object.fromEntries(Object.entries(sums).map(([k, v]) => [`agent_fs.${k}_us_each`, round((v * 1000) / n, 1)]));
const mountLines = readFileSync("/proc/self/mountinfo", "utf8").split("\n").length - 1;
console.log(JSON.stringify({ rounds: ROUNDS, perRound: PER_ROUND, mountinfoLines: mountLines, ...each }, null, 2));
