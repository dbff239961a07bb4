// The server's floor per cycle (create + first command + kill, the pool refilling the member): an
// estimate of the least CPU of edge (workerd) + agent + spawner + sqld that a design meeting the
// product's own requirements spends, composed from unit floors measured in the same run as the
// figure it is set against. Not a strict bound (docs/ARCHITECTURE.md, "The server's floor per
// cycle"): its units are priced one at a time, cheaper under concurrency; the Durable Object turns
// count one per client request (this design's shape); the command unit is this spawner's path.
// The printed figure is the median of each round's composition, not the composition of the
// printed unit medians. bench/e2e-steps.ts (one client, one step at a time) and bench/e2e.ts (20
// clients) both measure the unit floors here, in rounds of their own between or after their
// phases, and compose them with composeServerFloor.
//
// The unit floors, each one at a time, CPU of all the process's threads (schedstat):
//   request  workerd per GET /health: a route that calls nothing (what a request costs workerd
//            before any of our work)
//   sqld     sqld per `SELECT 1` over HTTP through the client the edge uses (@libsql/client/web)
//   frame    workerd per agent-link frame that does nothing (a heartbeat, on a cluster session of
//            its own, paced so each frame is an event of its own as an agent's are)
//   cmd      the agent's and its spawner's floor per command (bench/agent-cmd-floor.ts: a bare
//            node:http server starting the same command in a sandbox at the same level through the
//            same spawner), .server and .spawner
//   isolation  the kernel work of one sandbox made and destroyed that the agent and spawner do in
//            their own processes (bench/isolation-unit.ts: a bare Node process doing it directly;
//            what it counts and leaves out is argued there), composed apart: the floor is given
//            without it (as before) and with it (composeServerFloor's `withIsolation`)
import { createClient, type Client } from "@libsql/client/web";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import type { IsolationLevel } from "../controllers/drivers/driver.ts";
import { ScriptedAgent, tcpTransport } from "../test/support/scripted-agent.ts";
import { CmdFloor } from "./agent-cmd-floor.ts";
import { IsolationUnit } from "./isolation-unit.ts";
import type { Figures } from "./run.ts";
import { median, minMax, round, threadsCpuMs } from "./stats.ts";

/** One round's unit floors, ms of CPU per unit. `cmdServer`/`cmdSpawner` NaN without a cmd floor,
 * `isolation` NaN without an isolation unit (`isolationSteps` its share by step). */
export interface UnitFloors {
  request: number;
  sqld: number;
  frame: number;
  cmdServer: number;
  cmdSpawner: number;
  isolation: number;
  isolationSteps: Record<string, number>;
  /** The isolation unit's bare process's resident size (KiB; NaN without one). */
  isolationRssKB: number;
}

/** What a cycle costs at least by this estimate, by item: `count` units of `unit` each. `coalescable`: work
 * that concurrent cycles could share (one libSQL request or one agent frame carrying several
 * cycles' rows or reports, with no timer: issue 16 forbids batching waits), so the estimate at
 * concurrency counts it 0 (any number of cycles could share one); one at a time it cannot be
 * shared and counts in full. */
export interface FloorItem {
  what: string;
  /** `invocation`: the cheaper of the request and frame floors (a workerd event of another kind). */
  unit: "request" | "frame" | "invocation" | "sqld" | "cmd" | "isolation";
  count: number;
  coalescable: boolean;
}

// The counts, each argued as required by the product (E2B's API through one edge; the agent
// behind its WebSocket held by a Durable Object; the sandbox index in libSQL; nothing answered
// before it is stored), erring low: a count left out only lowers the estimate.
export const CYCLE_FLOOR: readonly FloorItem[] = [
  // The SDK's three calls are three requests to the edge (POST /sandboxes, the command's
  // Process/Start through the gateway, DELETE /sandboxes/{id}): each is a client's own request, so
  // none can share an invocation. Forwarding the command to the agent (a fetch out of workerd)
  // costs more than this floor's route that calls nothing: counted 0.
  { what: "client requests (create, command, kill)", unit: "request", count: 3, coalescable: false },
  // The create's claim and the kill change state that must be stored before the answer, and one
  // writer must order them (two creates must not claim the same member): a Durable Object turn
  // each, one per client request (a Worker's call is its own event in the object). The claim's
  // frame to the agent (its env and token) and the kill's are sent from these same turns, and the
  // refill needs no order of its own (the claim can carry it): no separate count for frames out.
  // A turn is valued at the cheaper of the two measured workerd events, as it is neither.
  { what: "Durable Object turns that store (claim, kill)", unit: "invocation", count: 2, coalescable: false },
  // The refilled member's ready report: the edge must learn a member is ready before it hands it
  // out, and only the agent knows. The claim's ack and the destroy's report are not required
  // before anything is answered: left out.
  { what: "agent-link frames in (the refill's ready report)", unit: "frame", count: 1, coalescable: true },
  // The sandbox's index row (GET /sandboxes lists it) at create, and its tombstone at kill.
  { what: "libSQL requests (index row, tombstone)", unit: "sqld", count: 2, coalescable: true },
  // The command in the agent and its spawner. The claim's and kill's work in the agent counts 0:
  // unmeasured, so the estimate errs low. Making and destroying the sandbox's isolation is
  // ISOLATION_ITEM's, composed apart (the tools' CPU stays out: the spawner's children's).
  { what: "the command in the agent and its spawner", unit: "cmd", count: 1, coalescable: false },
];

// Making and destroying the sandbox's isolation, in the agent's and spawner's own processes: one
// sandbox made (the refill) and one destroyed (the kill) per cycle, each its own kernel objects
// (cgroups, a holder, a record), so nothing concurrent cycles could share. Kept out of CYCLE_FLOOR
// so the floor without it stays the figure it was (e2e.server_floor_cpu_ms_each).
export const ISOLATION_ITEM: FloorItem = { what: "the sandbox's isolation made and destroyed (agent + spawner, own processes)", unit: "isolation", count: 1, coalescable: false };

function floorItems(withIsolation = false): readonly FloorItem[] {
  return withIsolation ? [...CYCLE_FLOOR, ISOLATION_ITEM] : CYCLE_FLOOR;
}

/** The composed floor (ms per cycle) and each item's share. `concurrent`: the cycles run side by
 * side (the e2e window's 20 clients), so coalescable items count 0. */
export function composeServerFloor(f: UnitFloors, opts: { concurrent: boolean; withIsolation?: boolean }, items: readonly FloorItem[] = floorItems(opts.withIsolation)): { total: number; parts: { what: string; ms: number }[] } {
  const value = { request: f.request, frame: f.frame, invocation: Math.min(f.request, f.frame), sqld: f.sqld, cmd: f.cmdServer + f.cmdSpawner, isolation: f.isolation };
  const parts = items.map((it) => ({ what: it.what, ms: it.coalescable && opts.concurrent ? 0 : it.count * value[it.unit] }));
  for (const p of parts) if (!Number.isFinite(p.ms) || p.ms < 0) throw new Error(`server floor: ${p.what}: no measured floor (${p.ms})`);
  return { total: parts.reduce((a, p) => a + p.ms, 0), parts };
}

type Target = { apiUrl: string; edgePid: number; sqldPid: number };

/** Takes the unit floors against a running system, a round at a time. */
export class UnitFloorRounds {
  readonly #sys: Target;
  readonly #frames: ScriptedAgent;
  readonly #db: Client;
  readonly #cmd: CmdFloor | undefined;
  readonly #isolation: IsolationUnit | undefined;
  private constructor(sys: Target, frames: ScriptedAgent, db: Client, cmd: CmdFloor | undefined, isolation: IsolationUnit | undefined) {
    this.#sys = sys;
    this.#frames = frames;
    this.#db = db;
    this.#cmd = cmd;
    this.#isolation = isolation;
  }

  /** `cmd`: where and at which level the command floor makes its sandbox (none: no cmd floor); at
   * `bwrap+cgroup` the isolation unit's sandboxes go beside it (elsewhere: no isolation unit, its
   * figures left out). An isolation unit that cannot start (no cgroups, not root) is said and left
   * out, not the other floors. */
  static async start(sys: { apiUrl: string; clusterToken: string; sqldUrl: string; edgePid: number; sqldPid: number }, cmd?: { dataDir: string; level: IsolationLevel }): Promise<UnitFloorRounds> {
    let isolation: IsolationUnit | undefined;
    if (cmd?.level === "bwrap+cgroup") {
      try {
        // Beside the command floor's data directory, not in it (that one is its driver's).
        mkdirSync(dirname(cmd.dataDir), { recursive: true });
        isolation = IsolationUnit.start(dirname(cmd.dataDir));
      } catch (err) {
        console.error(`server floor: no isolation unit: ${(err as Error).message}`);
      }
    }
    let cmdFloor: CmdFloor | undefined;
    try {
      cmdFloor = cmd ? await CmdFloor.start(cmd.dataDir, cmd.level) : undefined;
    } catch (err) {
      await isolation?.stop();
      throw err;
    }
    // Its own cluster, so the agent's session is left alone.
    const frames = new ScriptedAgent({ agentId: "frame-floor", ping: false });
    try {
      await frames.connect(tcpTransport(sys.apiUrl, sys.clusterToken, "frame-floor"));
    } catch (err) {
      await cmdFloor?.stop(); // its sandbox (a cgroup, a mounted disk image) goes with it
      await isolation?.stop();
      throw err;
    }
    return new UnitFloorRounds({ apiUrl: sys.apiUrl, edgePid: sys.edgePid, sqldPid: sys.sqldPid }, frames, createClient({ url: sys.sqldUrl }), cmdFloor, isolation);
  }

  /** One round: each floor over `n` units one at a time. */
  async round(n: number): Promise<UnitFloors> {
    const { apiUrl, edgePid, sqldPid } = this.#sys;
    const e = threadsCpuMs(edgePid);
    for (let i = 0; i < n; i++) await (await fetch(`${apiUrl}/health`)).text();
    const request = (threadsCpuMs(edgePid) - e) / n;
    const q = threadsCpuMs(sqldPid);
    for (let i = 0; i < n; i++) await this.#db.execute("SELECT 1");
    const sqld = (threadsCpuMs(sqldPid) - q) / n;
    // Paced (no answer to wait for): each frame is an event of its own, as an agent's are.
    const w = threadsCpuMs(edgePid);
    for (let i = 0; i < n; i++) {
      this.#frames.sendFrame({ type: "heartbeat", at: Date.now(), sandboxes: 0 });
      await new Promise((r) => setTimeout(r, 20));
    }
    const frame = (threadsCpuMs(edgePid) - w) / n;
    const c = this.#cmd ? await this.#cmd.round(n) : { server: NaN, spawner: NaN };
    // A failing isolation round costs its own figures only (NaN: hasIsolation drops them), not the
    // other floors'; stop() removes what it left.
    const none = { total: NaN, steps: {}, rssKB: NaN };
    const iso = this.#isolation
      ? await this.#isolation.round(n).catch((err: Error) => {
          console.error(`server floor: no isolation figure this round: ${err.message}`);
          return none;
        })
      : none;
    return { request, sqld, frame, cmdServer: c.server, cmdSpawner: c.spawner, isolation: iso.total, isolationSteps: iso.steps, isolationRssKB: iso.rssKB };
  }

  async stop(): Promise<void> {
    try {
      this.#frames.disconnect();
      this.#db.close();
      await this.#cmd?.stop();
    } finally {
      await this.#isolation?.stop();
    }
  }
}

/** The rounds' medians with their spread, one figure per unit floor, under `prefix`. */
export function unitFloorFigures(prefix: string, rounds: UnitFloors[]): Figures {
  const fig = (xs: number[]) => ({ value: round(median(xs), 2), unit: "ms", spread: minMax(xs) });
  const figures: Figures = {
    [`${prefix}.request_floor_cpu_ms`]: fig(rounds.map((r) => r.request)),
    [`${prefix}.sqld_request_floor_cpu_ms`]: fig(rounds.map((r) => r.sqld)),
    [`${prefix}.agent_frame_floor_cpu_ms`]: fig(rounds.map((r) => r.frame)),
  };
  if (rounds.every((r) => Number.isFinite(r.cmdServer))) {
    figures[`${prefix}.cmd_floor_cpu_ms`] = fig(rounds.map((r) => r.cmdServer + r.cmdSpawner));
    figures[`${prefix}.cmd_floor_cpu_ms.server`] = fig(rounds.map((r) => r.cmdServer));
    figures[`${prefix}.cmd_floor_cpu_ms.spawner`] = fig(rounds.map((r) => r.cmdSpawner));
  }
  if (hasIsolation(rounds)) {
    figures[`${prefix}.isolation_floor_cpu_ms_each`] = fig(rounds.map((r) => r.isolation));
    for (const step of Object.keys(rounds[0]!.isolationSteps)) figures[`${prefix}.isolation_floor_cpu_ms_each.${step}`] = fig(rounds.map((r) => r.isolationSteps[step] ?? 0));
    figures[`${prefix}.isolation_floor_parent_rss_mb`] = { value: round(median(rounds.map((r) => r.isolationRssKB)) / 1024, 1), unit: "MB" };
  }
  return figures;
}

/** Whether every round measured the isolation unit. */
export function hasIsolation(rounds: UnitFloors[]): boolean {
  return rounds.length > 0 && rounds.every((r) => Number.isFinite(r.isolation));
}

/** The floor's share per server process (ms per cycle, each the median over rounds), to set each
 * process's own CPU against: the edge (requests, turns, frames), sqld, and the agent with its
 * spawner (the command; the isolation with `withIsolation`). */
export function floorByProcess(rounds: UnitFloors[], opts: { concurrent: boolean; withIsolation: boolean }): { edge: number; sqld: number; agentSpawner: number } {
  const items = floorItems(opts.withIsolation);
  const shares = rounds.map((r) => {
    const by = { edge: 0, sqld: 0, agentSpawner: 0 };
    composeServerFloor(r, opts, items).parts.forEach((p, i) => {
      const unit = items[i]!.unit;
      by[unit === "sqld" ? "sqld" : unit === "cmd" || unit === "isolation" ? "agentSpawner" : "edge"] += p.ms;
    });
    return by;
  });
  return { edge: median(shares.map((s) => s.edge)), sqld: median(shares.map((s) => s.sqld)), agentSpawner: median(shares.map((s) => s.agentSpawner)) };
}

/** Ours minus the floor's share, per process (ms per cycle): `ours` the edge's, agent's, spawner's
 * and sqld's own CPU per cycle. */
export function gapByProcess(ours: { edge: number; agent: number; spawner: number; sqld: number }, by: { edge: number; sqld: number; agentSpawner: number }): { edge: number; agent_spawner: number; sqld: number } {
  return { edge: ours.edge - by.edge, agent_spawner: ours.agent + ours.spawner - by.agentSpawner, sqld: ours.sqld - by.sqld };
}

/** The composed floor of each round (its spread), the median round's. */
export function composedFloors(rounds: UnitFloors[], concurrent: boolean, withIsolation = false): number[] {
  return rounds.map((r) => composeServerFloor(r, { concurrent, withIsolation }).total);
}
