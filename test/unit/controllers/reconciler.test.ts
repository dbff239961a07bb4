// The reconciler against a scripted driver: what it reports to the edge and acks when
// `driver.ensure` succeeds, fails transiently (retried with backoff, never Failed) or fails
// terminally (Failed at once, with its message, not retried).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { IntentStore } from "../../../controllers/agent/intent-store.ts";
import { NOT_READY_REASON, refillMayWait, RETRY_REASON, Reconciler } from "../../../controllers/agent/reconciler.ts";
import type { StartCommands, StartStatus } from "../../../controllers/agent/start-commands.ts";
import { TerminalError, UnsupportedError, type DesiredSandbox, type Driver, type SandboxObservation } from "../../../controllers/drivers/driver.ts";
import { restarting } from "../../../controllers/drivers/local/restart-backoff.ts";
import { createRuntime } from "../../../controllers/runtime/runtime.ts";
import type { SandboxView } from "../../../controllers/runtime/sandbox-view.ts";
import { IntentSchema, type IntentInput, type ObservationInput } from "../../../schema/protocol/index.ts";
import { waitFor } from "../../support/wait-for.ts";

/** What one `ensure` call does: succeed, or throw this. */
type Step = "ok" | Error;

/** A driver whose `ensure` follows a script per sandbox (then succeeds), and remembers its calls. */
class ScriptedDriver implements Driver {
  readonly name = "scripted";
  readonly capabilities = {
    level: "process" as const,
    rootView: false,
    networkIsolation: false,
    limits: { cpu: false, memory: false, pids: false },
    freeze: "signal" as const,
    kill: "signal" as const,
    snapshotFs: false,
    memorySnapshot: false,
    survivesAgentRestart: false,
    hostView: true,
    notes: [],
  };
  readonly calls = new Map<string, number>();
  /** When each `ensure` of a sandbox ran (ms). */
  readonly callTimes = new Map<string, number[]>();
  /** Per sandbox, waits to answer with first (Pending, `retryAfterMs`: a restart's backoff). */
  readonly waits = new Map<string, number[]>();
  /** Snapshots taken (sandbox:snapshot); `snapshotFails` makes the next ones throw. */
  readonly snapshots: string[] = [];
  snapshotFails: Error | undefined = new UnsupportedError("snapshots", "scripted");
  readonly #running = new Map<string, SandboxObservation>();
  /** The driver's own conditions per sandbox, in each observation it makes. */
  readonly conditions = new Map<string, SandboxObservation["conditions"]>();
  /** The incarnation of each sandbox's processes, in each observation it makes. */
  readonly incarnations = new Map<string, string>();
  /** What `observe`/`list` answer instead until the next `ensure` (a pid 1 that ended, as the
   * local driver sees it until its restart). */
  readonly seenAs = new Map<string, SandboxObservation>();
  /** When its sandboxes were created, as it reports them. */
  createdAt = new Date(0).toISOString();
  readonly script: Record<string, Step[]>;
  constructor(script: Record<string, Step[]>) {
    this.script = script;
  }

  async ensure(d: DesiredSandbox): Promise<SandboxObservation> {
    const n = this.calls.get(d.id) ?? 0;
    this.calls.set(d.id, n + 1);
    this.callTimes.set(d.id, [...(this.callTimes.get(d.id) ?? []), Date.now()]);
    const step = this.script[d.id]?.[n] ?? "ok";
    if (step !== "ok") throw step;
    const wait = this.waits.get(d.id)?.shift();
    this.seenAs.delete(d.id);
    const obs: SandboxObservation = { id: d.id, generation: d.generation, phase: wait ? "Pending" : d.state === "Paused" ? "Paused" : "Running", ...(wait ? { retryAfterMs: wait } : {}), level: "process", createdAt: this.createdAt, enforced: { cpu: false, memory: false, pids: false, network: false }, ...(this.conditions.has(d.id) ? { conditions: this.conditions.get(d.id) } : {}), ...(this.incarnations.has(d.id) ? { incarnation: this.incarnations.get(d.id) } : {}) };
    this.#running.set(d.id, obs);
    return obs;
  }
  async observe(id: string) {
    return this.seenAs.get(id) ?? this.#running.get(id);
  }
  async list() {
    return [...this.#running.values()].map((o) => this.seenAs.get(o.id) ?? o);
  }
  view(): SandboxView {
    return {} as SandboxView; // registered with the runtime, never used: no command runs here
  }
  async exec(): Promise<never> {
    throw new Error("not used");
  }
  async freeze() {}
  async thaw() {}
  async snapshotFs(id: string, snapshotId = "x") {
    if (this.snapshotFails) throw this.snapshotFails;
    this.snapshots.push(`${id}:${snapshotId}`);
    return { id: snapshotId, sandboxId: id, location: "", bytes: 0, createdAt: "" };
  }
  async restoreFs() {}
  async deleteSnapshot() {}
  async destroy(id: string) {
    this.#running.delete(id);
  }
}

function intent(id: string, over: Partial<IntentInput> = {}) {
  return IntentSchema.parse({
    sandboxId: id,
    generation: 2,
    owner: { kind: "sandbox" },
    desired: { state: "running" },
    template: { id: "base", revision: "r1", image: "base", user: "user", workdir: "/home/user", resources: { cpuCount: 1, memoryMB: 256 } },
    issuedAt: 0,
    ...over,
  });
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A reconciler over the scripted driver with a fast backoff, recording reports and acks. */
function harness(script: Record<string, Step[]>, starts?: StartCommands, onAck?: (dir: string, id: string, generation: number) => void) {
  const dir = mkdtempSync(join(tmpdir(), "reconciler-"));
  dirs.push(dir);
  const driver = new ScriptedDriver(script);
  const reports: ObservationInput[] = [];
  const acks: { id: string; generation: number; result: string; message?: string; snapshotError?: { reason: string; message: string } }[] = [];
  const store = new IntentStore(dir);
  const reconciler = new Reconciler({
    store,
    driver,
    runtime: createRuntime({ onError: () => {} }),
    report: (o) => reports.push(o),
    settled: (id, generation, result, message, snapshotError) => {
      onAck?.(dir, id, generation);
      acks.push({ id, generation, result, message, ...(snapshotError ? { snapshotError } : {}) });
    },
    backoff: { baseMs: 1, maxMs: 8 },
    onError: () => {},
    starts,
  });
  return { driver, reports, acks, reconciler, store };
}

const transient = (msg = "cgroup write: EBUSY") => new Error(msg);

interface Row {
  name: string;
  script: Step[];
  owner?: "sandbox" | "pool";
  /** The phases reported, in order (each with ready). */
  reported: string[];
  acks: string[];
  /** How many times ensure ran. */
  calls: number;
}

const rows: Row[] = [
  { name: "success: Running and ready, acked applied", script: ["ok"], reported: ["Running:ready"], acks: ["applied"], calls: 1 },
  {
    name: "transient failures then success: Pending with Ready=False while retrying, never Failed, then Running; the client's ack waits for it",
    script: [transient(), transient(), "ok"],
    reported: ["Pending:ReconcileError", "Pending:ReconcileError", "Running:ready"],
    acks: ["applied"],
    calls: 3,
  },
  {
    name: "transient failure of a pool member: acked accepted at once (nobody waits), then converges",
    script: [transient(), "ok"],
    owner: "pool",
    reported: ["Pending:ReconcileError", "Running:ready"],
    acks: ["accepted", "applied"],
    calls: 2,
  },
  { name: "terminal error: Failed at once with its reason and message, acked, not retried", script: [new TerminalError("InvalidSpec", "image nope:latest cannot exist")], reported: ["Failed:InvalidSpec"], acks: ["accepted"], calls: 1 },
  { name: "an unsupported capability is terminal", script: [new UnsupportedError("template gpu", "the local driver has only the base template")], reported: ["Failed:Unsupported"], acks: ["accepted"], calls: 1 },
];

function describeReport(o: ObservationInput): string {
  return `${o.phase}:${o.ready ? "ready" : o.reason}`;
}

describe("Reconciler", () => {
  it.each(rows)("$name", async (row) => {
    const { driver, reports, acks, reconciler } = harness({ s1: row.script });
    reconciler.offer(intent("s1", { owner: row.owner === "pool" ? { kind: "pool", id: "p" } : { kind: "sandbox" } }));
    await waitFor(() => reports.some((o) => o.phase === "Running" || o.phase === "Failed"), { what: "a final report" });
    await reconciler.queue.idle();
    expect(reports.map(describeReport)).toEqual(row.reported);
    expect(acks.map((a) => a.result)).toEqual(row.acks);
    expect(driver.calls.get("s1")).toBe(row.calls);
    expect(reports.some((o) => o.phase === "Failed")).toBe(row.reported.some((r) => r.startsWith("Failed")));
    const failed = row.script.find((s): s is TerminalError => s instanceof TerminalError);
    if (failed) {
      expect(reports[0]).toMatchObject({ message: failed.message, conditions: [{ type: "Ready", status: "False", reason: failed.reason, message: failed.message }] });
      expect(acks[0]?.message).toBe(failed.message);
      expect(reconciler.queue.failures("s1")).toBe(0); // nothing left to retry
    }
    reconciler.queue.close();
  });

  it("reports the driver's own conditions (a holder without the seccomp filter) as the driver gives them, again when they change, and in the hello inventory", async () => {
    const { driver, reports, reconciler } = harness({});
    const unfiltered = { type: "SeccompFiltered", status: "False" as const, reason: "UnfilteredHolder", message: "its holder (pid 1) runs without the seccomp filter" };
    driver.conditions.set("s1", [unfiltered]);
    reconciler.offer(intent("s1"));
    await waitFor(() => reports.some((o) => o.phase === "Running"), { what: "a report" });
    await reconciler.queue.idle();
    expect(reports.at(-1)).toMatchObject({ phase: "Running", ready: true, conditions: [unfiltered] });
    expect((await reconciler.inventory()).find((o) => o.sandboxId === "s1")).toMatchObject({ conditions: [unfiltered] });
    const count = reports.length;
    driver.conditions.set("s1", [{ type: "SeccompFiltered", status: "True", reason: "HolderRestarted", message: "restarted" }]);
    reconciler.queue.add("s1", { urgent: true });
    await waitFor(() => reports.length > count, { what: "the changed condition reported" });
    expect(reports.at(-1)).toMatchObject({ phase: "Running", ready: true, conditions: [{ type: "SeccompFiltered", status: "True", reason: "HolderRestarted" }] });
    reconciler.queue.close();
  });

  it("after a hello inventory that said restarting (a reconnect while pid 1 was down), the restart's Running and ready is reported again", async () => {
    const { driver, reports, reconciler } = harness({});
    reconciler.offer(intent("s1"));
    await waitFor(() => reports.some((o) => o.phase === "Running" && o.ready), { what: "ready" });
    await reconciler.queue.idle();
    const up = reports.at(-1)!;
    driver.seenAs.set("s1", restarting({ ...(await driver.observe("s1"))!, phase: "Failed" }, "pid 1 ended"));
    // The edge now holds this sandbox's requests until a report says it is ready.
    expect((await reconciler.inventory()).find((o) => o.sandboxId === "s1")).toMatchObject({ phase: "Pending", conditions: [{ type: "Ready", status: "False", reason: "Pid1Restarting" }] });
    const count = reports.length;
    reconciler.queue.add("s1", { urgent: true });
    await waitFor(() => reports.length > count, { what: "the restart reported", timeoutMs: 2_000 });
    expect(reports.at(-1)).toMatchObject({ phase: "Running", ready: true, generation: up.generation });
    reconciler.queue.close();
  });

  it("a sandbox whose processes were all replaced within one ensure (an update ops recreate) starts its template's start command again, not as adopted", async () => {
    const calls: { id: string; adopted: boolean; startCmd?: string }[] = [];
    const forgotten: string[] = [];
    const starts = {
      status: (id: string, _sbx: unknown, spec: { startCmd?: string }, _t: number, adopted: boolean) => (calls.push({ id, adopted, startCmd: spec.startCmd }), { state: "ready" }),
      forget: (id: string) => forgotten.push(id),
    } as unknown as StartCommands;
    const { driver, reports, reconciler } = harness({}, starts);
    const template = (v: string) => ({ id: "web", revision: v, image: "web", user: "user", workdir: "/srv", resources: { cpuCount: 1, memoryMB: 256 }, startCmd: `serve ${v}` });
    // Made before this agent started: adopted, its start command already runs in it.
    driver.createdAt = new Date(Date.now() - 60_000).toISOString();
    driver.incarnations.set("s1", "100:1");
    reconciler.offer(intent("s1", { template: template("r1") }));
    await waitFor(() => reports.some((o) => o.ready), { what: "ready" });
    await reconciler.queue.idle();
    expect(calls).toEqual([{ id: "s1", adopted: true, startCmd: "serve r1" }]);
    // The same processes at the next generation: nothing starts again.
    reconciler.offer(intent("s1", { generation: 3, template: template("r1") }));
    await waitFor(() => reports.some((o) => o.generation === 3 && o.ready), { what: "generation 3 ready" });
    await reconciler.queue.idle();
    expect(forgotten).toEqual([]);
    // A new revision, recreated: new processes (a new incarnation) in the same ensure.
    driver.incarnations.set("s1", "200:5");
    reconciler.offer(intent("s1", { generation: 4, template: template("r2") }));
    await waitFor(() => reports.some((o) => o.generation === 4 && o.ready), { what: "generation 4 ready" });
    await reconciler.queue.idle();
    expect(forgotten).toEqual(["s1"]);
    expect(calls.at(-1)).toEqual({ id: "s1", adopted: false, startCmd: "serve r2" });
    reconciler.queue.close();
  });

  it("a template with a ready command: Running but not ready (no ack) until it passes; one that fails is Failed with its message", async () => {
    // The start machinery's answer per sandbox, as the test sets it (start-commands.ts runs the real one).
    const answers = new Map<string, StartStatus>([["s1", { state: "starting" }], ["s2", { state: "starting" }]]);
    const asked: string[] = [];
    const starts = { status: (id: string) => (asked.push(id), answers.get(id)!), forget: () => {} } as unknown as StartCommands;
    const { reports, acks, reconciler } = harness({}, starts);
    const template = { id: "web", revision: "r1", image: "web", user: "user", workdir: "/srv", resources: { cpuCount: 1, memoryMB: 256 }, startCmd: "serve", readyCmd: "probe" };
    reconciler.offer(intent("s1", { template }));
    reconciler.offer(intent("s2", { template }));
    await waitFor(() => asked.includes("s1") && asked.includes("s2"), { what: "both asked" });
    await reconciler.queue.idle();
    expect(reports.filter((o) => o.sandboxId === "s1").map((o) => `${o.phase}:${o.ready}`)).toEqual(["Running:false"]);
    expect(acks).toEqual([]); // the client's create waits

    answers.set("s1", { state: "ready" });
    answers.set("s2", { state: "failed", message: "the template's ready command did not pass within 8 s" });
    reconciler.queue.add("s1", { urgent: true });
    reconciler.queue.add("s2", { urgent: true });
    await waitFor(() => acks.length === 2, { what: "both acked" });
    expect(reports.filter((o) => o.sandboxId === "s1").map((o) => `${o.phase}:${o.ready}`)).toEqual(["Running:false", "Running:true"]);
    expect(reports.filter((o) => o.sandboxId === "s2").at(-1)).toMatchObject({ phase: "Failed", ready: false, reason: NOT_READY_REASON, message: "the template's ready command did not pass within 8 s" });
    expect(acks.find((a) => a.id === "s1")?.result).toBe("applied");
    expect(acks.find((a) => a.id === "s2")).toMatchObject({ result: "accepted", message: "the template's ready command did not pass within 8 s" });
    reconciler.queue.close();
  });

  it("reports a transient failure as a Ready=False condition with the error and the retry, and the retries back off", async () => {
    const { reports, reconciler } = harness({ s2: [transient("disk full"), transient("disk full"), transient("disk full"), transient("disk full"), "ok"] });
    reconciler.offer(intent("s2"));
    await waitFor(() => reports.some((o) => o.phase === "Running"), { what: "Running" });
    const retries = reports.filter((o) => o.reason === RETRY_REASON);
    expect(retries).toHaveLength(4);
    for (const o of retries) {
      expect(o).toMatchObject({ phase: "Pending", ready: false, conditions: [{ type: "Ready", status: "False", reason: RETRY_REASON }] });
      expect(o.message).toMatch(/^disk full \(attempt \d, retrying in \d+ ms\)$/);
    }
    // Attempt n waits base·2^(n-1), capped: 1, 2, 4, 8 ms with this harness's policy.
    expect(retries.map((o) => o.message!.match(/attempt (\d), retrying in (\d+) ms/)!.slice(1).map(Number))).toEqual([
      [1, 1],
      [2, 2],
      [3, 4],
      [4, 8],
    ]);
    expect(reconciler.queue.failures("s2")).toBe(0); // the success reset the backoff
    reconciler.queue.close();
  });

  it("a sandbox the driver says waits (a restart's backoff) gets its next pass when the wait ends, not every 250 ms", async () => {
    const { driver, reports, reconciler } = harness({});
    driver.waits.set("s9", [900]);
    reconciler.offer(intent("s9"));
    await waitFor(() => reports.some((o) => o.phase === "Running"), { what: "Running after the wait", timeoutMs: 5000 });
    expect(reports.map(describeReport)[0]).toBe("Pending:undefined");
    const [first, second] = driver.callTimes.get("s9")!;
    expect(driver.calls.get("s9")).toBe(2);
    // Timers may fire a little early against Date.now (rounding): a margin, far from 250 ms.
    expect(second! - first!).toBeGreaterThanOrEqual(850);
    reconciler.queue.close();
  });

  it("keeps a running sandbox's phase while a change to it is retried", async () => {
    const { driver, reports, acks, reconciler } = harness({});
    reconciler.offer(intent("s3"));
    await waitFor(() => acks.length === 1);
    driver.script.s3 = ["ok", transient("api server: connection reset"), "ok"];
    reconciler.offer(intent("s3", { generation: 3, allowInternetAccess: false }));
    await waitFor(() => acks.length === 2, { what: "the second ack" });
    expect(reports.map(describeReport)).toEqual(["Running:ready", "Running:ReconcileError", "Running:ready"]);
    expect(acks.map((a) => `${a.generation}:${a.result}`)).toEqual(["2:applied", "3:applied"]);
    reconciler.queue.close();
  });

  it("what the edge is acked survives an agent crash: an agent started at any ack holds that intent, and no intent of a sandbox acked deleted", async () => {
    // The intent store a restarted agent would open, read at the moment each ack goes out.
    const seen: string[] = [];
    const { acks, reconciler } = harness({}, undefined, (dir, id, generation) => {
      const held = new IntentStore(dir).get(id);
      seen.push(`${id}@${generation}:${held ? `${held.generation} ${held.desired.state} ${held.owner.kind}` : "none"}`);
    });
    reconciler.offer(intent("s6", { owner: { kind: "pool", id: "p" } }));
    await waitFor(() => acks.length === 1);
    reconciler.offer(intent("s6", { generation: 3 })); // claimed
    await waitFor(() => acks.length === 2);
    reconciler.offer(intent("s6", { generation: 4, desired: { state: "deleted" } }));
    await waitFor(() => acks.length === 3);
    // A redelivery of what is held is acked at once ("stale"): on disk first too.
    reconciler.offer(intent("s7", { generation: 2 }));
    await waitFor(() => acks.length === 4);
    expect(reconciler.offer(intent("s7", { generation: 2 }))).toBe("stale");
    expect(new IntentStore(dirs.at(-1)!).get("s7")?.generation).toBe(2);
    expect(seen).toEqual(["s6@2:2 running pool", "s6@3:3 running sandbox", "s6@4:none", "s7@2:2 running sandbox"]);
    reconciler.queue.close();
  });

  it("what the driver acts on survives an agent crash: a new generation is on disk before the driver starts on it, not only at its ack", async () => {
    const { driver, acks, reconciler } = harness({});
    reconciler.offer(intent("s8"));
    await waitFor(() => acks.length === 1);
    // The intent store a restarted agent would open, read as the driver starts on each generation.
    const held: number[] = [];
    const ensure = driver.ensure.bind(driver);
    driver.ensure = (d) => {
      held.push(new IntentStore(dirs.at(-1)!).get("s8")?.generation ?? 0);
      return ensure(d);
    };
    const template = { id: "base", revision: "r2", image: "base", user: "user", workdir: "/home/user", resources: { cpuCount: 1, memoryMB: 256 } };
    reconciler.offer(intent("s8", { generation: 3, template }));
    await waitFor(() => acks.length === 2);
    expect(held).toEqual([3]);
    reconciler.queue.close();
  });

  it("a create is acked while earlier kills are still being destroyed: deletes never take the workers a waiting client needs", async () => {
    const { driver, acks, reconciler } = harness({});
    for (let i = 0; i < 10; i++) reconciler.offer(intent(`k${i}`));
    await waitFor(() => acks.length === 10);
    // Every destroy hangs until released (a slow unmount on a loaded host).
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    driver.destroy = () => gate;
    for (let i = 0; i < 10; i++) reconciler.offer(intent(`k${i}`, { generation: 3, desired: { state: "deleted" } }));
    reconciler.offer(intent("c1"));
    await waitFor(() => acks.some((a) => a.id === "c1"), { what: "the create's ack" });
    expect(acks.filter((a) => a.generation === 3)).toEqual([]);
    release();
    await waitFor(() => acks.filter((a) => a.generation === 3).length === 10, { what: "the kills' acks" });
    reconciler.queue.close();
  });

  it("claims before refills: a pool's new member waits while a claim of that pool runs; not once fewer than half its members are ready", async () => {
    const { driver, acks, reconciler } = harness({});
    const template = (id: string) => ({ id, revision: "r1", image: "base", user: "user", workdir: "/home/user", resources: { cpuCount: 1, memoryMB: 256 } });
    const member = (id: string, pool: string) => intent(id, { generation: 1, owner: { kind: "pool", id: pool }, template: template(pool) });
    const claim = (id: string, pool: string) => intent(id, { generation: 2, template: template(pool) });
    for (const id of ["a0", "a1", "a2"]) reconciler.offer(member(id, "wide"));
    reconciler.offer(member("b0", "narrow"));
    await waitFor(() => acks.length === 4, { what: "the warm members" });
    // Claims whose pass hangs until released (a slow /init).
    const gates = new Map<string, () => void>();
    const ensure = driver.ensure.bind(driver);
    driver.ensure = async (d) => {
      if (d.generation === 2) await new Promise<void>((r) => gates.set(d.id, r));
      return ensure(d);
    };
    // Pool "wide": one of three claimed, its refill offered; two of three ready: it waits.
    reconciler.offer(claim("a0", "wide"));
    reconciler.offer(member("a3", "wide"));
    // Pool "narrow": its only member claimed, two refills offered; none ready: they run now.
    reconciler.offer(claim("b0", "narrow"));
    reconciler.offer(member("b1", "narrow"));
    reconciler.offer(member("b2", "narrow"));
    await waitFor(() => driver.calls.get("b1") === 1 && driver.calls.get("b2") === 1, { what: "the drained pool's refills, beside the claims" });
    await waitFor(() => gates.size === 2, { what: "both claims' passes" });
    expect(driver.calls.get("a3")).toBeUndefined();
    gates.get("b0")!();
    await waitFor(() => acks.some((a) => a.id === "b0" && a.generation === 2));
    expect(driver.calls.get("a3")).toBeUndefined(); // a0's claim still runs
    gates.get("a0")!();
    await waitFor(() => driver.calls.get("a3") === 1, { what: "the refill once the claims are over" });
    const a0 = acks.findIndex((a) => a.id === "a0" && a.generation === 2);
    const a3 = acks.findIndex((a) => a.id === "a3");
    expect(a0).toBeGreaterThanOrEqual(0);
    expect(a3 === -1 || a3 > a0).toBe(true);
    reconciler.queue.close();
  });

  it("claims before refills: a claim's refill that arrives before the claim (as the edge sends them) still waits for it", async () => {
    const { driver, acks, reconciler } = harness({});
    const template = { id: "wide", revision: "r1", image: "base", user: "user", workdir: "/home/user", resources: { cpuCount: 1, memoryMB: 256 } };
    const member = (id: string) => intent(id, { generation: 1, owner: { kind: "pool", id: "wide" }, template });
    for (const id of ["a0", "a1", "a2"]) reconciler.offer(member(id));
    await waitFor(() => acks.length === 3, { what: "the warm members" });
    let claimRuns: (() => void) | undefined;
    const ensure = driver.ensure.bind(driver);
    driver.ensure = async (d) => {
      if (d.generation === 2) await new Promise<void>((r) => (claimRuns = r));
      return ensure(d);
    };
    // No claim has run yet (a lull); the refill's intent comes first, its claim's right after.
    reconciler.offer(member("a3"));
    await new Promise((r) => setTimeout(r, 20));
    reconciler.offer(intent("a0", { generation: 2, template }));
    await waitFor(() => claimRuns !== undefined, { what: "the claim's pass" });
    expect(driver.calls.get("a3")).toBeUndefined();
    claimRuns!();
    await waitFor(() => driver.calls.get("a3") === 1, { what: "the refill once the claim is over" });
    const a0 = acks.findIndex((a) => a.id === "a0" && a.generation === 2);
    expect(a0).toBeGreaterThanOrEqual(0);
    expect(acks.findIndex((a) => a.id === "a3")).toBeGreaterThan(a0);
    reconciler.queue.close();
  });

  it("refillMayWait: a pool with at least half its members ready, and one ready at least", () => {
    expect(refillMayWait(2, 3)).toBe(true);
    expect(refillMayWait(150, 200)).toBe(true);
    expect(refillMayWait(100, 200)).toBe(true);
    expect(refillMayWait(99, 200)).toBe(false);
    expect(refillMayWait(0, 1)).toBe(false);
    expect(refillMayWait(0, 0)).toBe(false);
  });

  it("takes the snapshot an intent asks for once, acks it applied; a failure rides the ack with its reason and leaves the sandbox running", async () => {
    const { driver, acks, reconciler, store } = harness({});
    reconciler.offer(intent("s4"));
    await waitFor(() => acks.length === 1);
    driver.snapshotFails = undefined;
    reconciler.offer(intent("s4", { generation: 3, snapshot: { id: "snapa" } }));
    await waitFor(() => acks.length === 2, { what: "the snapshot's ack" });
    expect(driver.snapshots).toEqual(["s4:snapa"]);
    expect(acks[1]).toEqual({ id: "s4", generation: 3, result: "applied" });
    // Done: stored without it, so another pass (an agent restart) does not take it again.
    expect(store.get("s4")?.snapshot).toBeUndefined();
    reconciler.queue.add("s4");
    await reconciler.queue.idle();
    expect(driver.snapshots).toEqual(["s4:snapa"]);

    driver.snapshotFails = new UnsupportedError("snapshots", "no Checkpoint controller");
    reconciler.offer(intent("s4", { generation: 4, snapshot: { id: "snapb" } }));
    await waitFor(() => acks.some((a) => a.generation === 4), { what: "the failed snapshot's ack" });
    expect(acks.find((a) => a.generation === 4)).toMatchObject({ generation: 4, result: "applied", snapshotError: { reason: "Unsupported", message: "snapshots is not supported: no Checkpoint controller" } });
    expect(await driver.observe("s4")).toMatchObject({ phase: "Running" });
    reconciler.queue.close();
  });
  it("a pass's log lines carry the request id of the intent it started with, not of one offered meanwhile (a kill sent once the pause was answered)", async () => {
    const { driver, acks, reconciler } = harness({});
    reconciler.offer(intent("s5"), `00-${"a".repeat(32)}-${"1".repeat(16)}-01`);
    await waitFor(() => acks.length === 1);
    let release!: () => void;
    const ensure = driver.ensure.bind(driver);
    const seen: (string | undefined)[] = [];
    driver.ensure = async (d) => {
      if (d.state === "Paused") await new Promise<void>((r) => (release = r));
      seen.push(reconciler.traceIdOf(d.id)); // what a line written now would carry
      return ensure(d);
    };
    reconciler.offer(intent("s5", { generation: 3, desired: { state: "paused" } }), `00-${"b".repeat(32)}-${"2".repeat(16)}-01`);
    await waitFor(() => release !== undefined, { what: "the pause under way" });
    reconciler.offer(intent("s5", { generation: 4, desired: { state: "deleted" } }), `00-${"c".repeat(32)}-${"3".repeat(16)}-01`);
    release();
    await waitFor(() => acks.some((a) => a.generation === 4), { what: "the kill's ack" });
    expect(seen).toEqual(["b".repeat(32)]);
    reconciler.queue.close();
  });
});
