// A template build run on this machine without an edge: the project's own templates
// (`code-interpreter`) are built by the same TemplateBuilder the agent runs for `Template.build`,
// with the same step sandboxes, layer cache (by step key) and step network, from a CLI or a
// test's global setup, before any edge exists. The log lines are the build's own (`[1/2] RUN …`,
// `CACHED [1/2] …`, each step's output).
import { SandboxNet } from "../sandbox-net.ts";
import { PortRelay } from "../port-relay.ts";
import { detectCgroups } from "../cgroups.ts";
import { RootfsStore } from "../rootfs/store.ts";
import type { TemplateStep } from "../../../../schema/api/template-build.ts";
import type { BuildFrame, BuildLog, BuildResult } from "../../../../schema/protocol/build.ts";
import { BUILD_DISK_MB, TemplateBuilder } from "./builder.ts";
import { probeDisk } from "../disk.ts";
import { openStepNet } from "./step-net.ts";
import { removeDeadStaging } from "./journal.ts";
import { removeDeadDirectBuildCgroups } from "./dead-cgroups.ts";
import { join } from "node:path";
import { usernsUnavailable } from "../userns.ts";
import { UidRanges } from "../uid-range.ts";

export interface DirectBuild {
  /** The rootfs template the steps start from (`base`). */
  from: string;
  steps: TemplateStep[];
  /** The rootfs template published at the end. */
  output: string;
  /** Part of every step's cache key, as a team id is for `Template.build`: builds under the same
   * owner share layers, no one else's do. */
  owner: string;
  cpuCount?: number;
  memoryMB?: number;
  /** The build's disk bound (BuilderOptions.buildDiskMB); by default BUILD_DISK_MB where the host
   * can loop-mount ext4 images, else none. */
  diskMB?: number;
  /** The build's file bound (BuilderOptions.buildFiles); by default BUILD_FILES. */
  files?: number;
}

export type BuildOutcome = BuildResult & { layers: string[] };

/**
 * Runs the build and resolves with its result (an error result when a step fails; its output is
 * in the lines before). Steps get a network as a sandbox's (the bridge, the nftables floor) when
 * this process is root and the host has one; otherwise loopback only, and installer steps fail.
 */
export async function runDirectBuild(b: DirectBuild, onLog: (entry: BuildLog) => void, store = new RootfsStore()): Promise<BuildOutcome> {
  // What a builder killed mid-step left (its staging directory and overlay mount, its step claims,
  // its cgroups and their processes; never a live one's).
  const note = (level: BuildLog["level"], message: string) => onLog({ seq: -1, at: Date.now(), level, message });
  const dead = await removeDeadDirectBuildCgroups().catch((err: Error) => (note("warn", `stale build cgroups: ${err.message}`), []));
  for (const dir of dead) note("info", `removed the cgroup ${dir} of a build killed before it could`);
  await removeDeadStaging(join(store.root, "layers"));
  const net = SandboxNet.open();
  const relay = new PortRelay();
  if (typeof net === "string") onLog({ seq: -1, at: Date.now(), level: "warn", message: `build steps have no network: ${net}` });
  const cgroups = detectCgroups(`kruise-builds-direct-${process.pid}`).layout;
  let done!: (r: BuildResult) => void;
  const result = new Promise<BuildResult>((ok) => (done = ok));
  const builder = new TemplateBuilder({
    store,
    cgroups,
    fetchFile: () => Promise.reject(new Error("a direct build has no uploaded files (COPY needs the edge)")),
    send: (items) => {
      for (const it of items) {
        for (const l of it.logs) onLog(l);
        if (it.result) done(it.result);
      }
      return true;
    },
    network: typeof net === "string" ? undefined : (dir) => openStepNet(net, relay, dir),
    buildDiskMB: b.diskMB ?? (probeDisk().level === "quota" ? BUILD_DISK_MB : undefined),
    ...(b.files !== undefined ? { buildFiles: b.files } : {}),
    // As the driver decides for its sandboxes (and an agent for its builds): a user namespace per
    // step unless the host cannot make one or KRUISE_LOCAL_USERNS=off.
    uids: usernsUnavailable() ?? new UidRanges(),
  });
  const frame: BuildFrame = {
    type: "build",
    buildId: `direct-${Date.now().toString(36)}-${process.pid}`,
    teamId: b.owner,
    from: { rootfs: b.from },
    steps: b.steps,
    force: false,
    cpuCount: b.cpuCount ?? 2,
    memoryMB: b.memoryMB ?? 2048,
    output: b.output,
    filesPath: "",
  };
  // The builder's flush timer does not hold the process open (an agent has its link for that).
  const alive = setInterval(() => undefined, 1 << 30);
  try {
    builder.start(frame);
    const r = await result;
    return { ...r, layers: r.status === "ready" ? (store.template(b.output)?.layers ?? []) : [] };
  } finally {
    clearInterval(alive);
    builder.dispose();
    relay.dispose();
  }
}
