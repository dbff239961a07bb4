// The spawner's CPU per spawn against the spawn floors it could reach (issue 16 §1), measured
// interleaved in one run. No root needed: every side starts `/bin/true` and waits for its exit.
//   node bench/spawn-floor.ts [rounds]     prints the figures as JSON (`npm run bench -- spawn-floor`)
// Sides, in a new random order each round, PER_ROUND spawns each, one at a time:
// - spawner: Spawner.spawn with stdio ignored (a holder's helpers: umount, rm, userns.pl), the
//   agent's request, the spawner's fork, its reply and the exit message;
// - spawner_pipes: the same with stdout and stderr as pipes (a command's shape: two pooled
//   connections, the pool refilled), each read to its end;
// - node: child_process.spawn in a resident small Node process started with the spawner's flags
//   (the floor of the present mechanism: libuv's fork of a Node process);
// - perl: fork + exec + waitpid in a resident Perl process (the host helpers' language; a small
//   process's fork, the floor a resident helper that forks would reach);
// - perl_server: the same helper as a spawner would be, one request at a time from this process:
//   a request line (id, file, args, NUL-separated), the child's stdio opened and its environment
//   set after the fork, a reply with the pid, another with the exit status (the measured potential
//   of a resident Perl spawner: docs/ARCHITECTURE.md, "The spawner's CPU per spawn").
// - spawner_flags (only with SPAWN_FLOOR_FLAGS="<node flags>"): the spawner side again, through a
//   second spawner started with those flags added (SBX_SPAWNER_NODE_ARGS): whether a flag makes
//   its forks cheaper, same run; spawn_floor.spawner_flags_vs_spawner_ratio per round.
// The figure per side is its process's main thread on-CPU time (schedstat, ns) over a round, per
// spawn: fork's copy of the page tables is charged to the parent, the exec and exit to the child.
// The agent's side (this process: the requests, replies, pool refills) is reported apart.
import { spawn, type ChildProcess } from "node:child_process";
import { loadavg } from "node:os";
import type { Readable } from "node:stream";
import { Spawner } from "../controllers/drivers/local/spawner.ts";
import type { LaunchedExit } from "../controllers/runtime/process/launcher.ts";
import type { Figures } from "./run.ts";
import { median, minMax, round, schedMs, seededRandom, shuffle, statusKB } from "./stats.ts";

const PER_ROUND = 100;
const TRUE = "/bin/true";
const ENV = { PATH: "/usr/bin:/bin" };

/** A resident process that runs `n` spawns when it reads a line `n`, and answers a line. */
class Resident {
  readonly #child: ChildProcess;
  #waiting: ((line: string) => void) | undefined;
  readonly #gone = onGone();
  #buf = "";
  constructor(file: string, args: string[]) {
    this.#child = spawn(file, args, { stdio: ["pipe", "pipe", "inherit"], env: ENV });
    this.#gone.watch(this.#child, file);
    this.#child.stdout!.setEncoding("utf8").on("data", (d: string) => {
      this.#buf += d;
      const nl = this.#buf.indexOf("\n");
      if (nl < 0) return;
      const line = this.#buf.slice(0, nl);
      this.#buf = this.#buf.slice(nl + 1);
      this.#waiting?.(line);
    });
  }
  get pid(): number {
    return this.#child.pid!;
  }
  run(n: number): Promise<string> {
    return this.#gone.race(
      new Promise((ok) => {
        this.#waiting = ok;
        this.#child.stdin!.write(`${n}\n`);
      }),
    );
  }
  stop(): void {
    this.#gone.stopping = true;
    this.#child.stdin!.end();
  }
}

/** A resident side that fails to start or dies mid-run (no Perl, a fork refused, the OOM killer)
 * fails this suite's wait at once instead of hanging it, or killing the whole bench with an
 * unhandled 'error'. */
function onGone() {
  let fail: (err: Error) => void = () => {};
  const gone = new Promise<never>((_, reject) => (fail = reject));
  gone.catch(() => {});
  const state = {
    stopping: false,
    watch(child: ChildProcess, what: string) {
      child.on("error", (err) => fail(new Error(`spawn floor: ${what}: ${err.message}`)));
      child.stdin?.on("error", () => {}); // its exit says why
      child.on("exit", (code, signal) => {
        if (!state.stopping) fail(new Error(`spawn floor: ${what} exited (${code ?? signal})`));
      });
    },
    race<T>(p: Promise<T>): Promise<T> {
      return Promise.race([p, gone]);
    },
  };
  return state;
}

const NODE_SIDE = `
const { spawn } = require("node:child_process");
const once = () => new Promise((ok) => spawn(${JSON.stringify(TRUE)}, [], { stdio: "ignore" }).once("exit", ok));
let buf = "";
process.stdin.setEncoding("utf8").on("data", async (d) => {
  buf += d;
  let nl;
  while ((nl = buf.indexOf("\\n")) >= 0) {
    const n = Number(buf.slice(0, nl));
    buf = buf.slice(nl + 1);
    for (let i = 0; i < n; i++) await once();
    process.stdout.write("done\\n");
  }
});`;

const PERL_SIDE = `
$| = 1;
while (my $n = <STDIN>) {
  for (1 .. $n) {
    my $pid = fork // die "fork: $!";
    if ($pid == 0) { exec ${JSON.stringify(TRUE)} or POSIX::_exit(127) }
    waitpid($pid, 0);
  }
  print "done\\n";
}`;

// A spawner's shape in Perl: parse the request, fork, set the child up, exec; answer the pid,
// then the exit. (Sequential: a real one would select over requests and SIGCHLD.)
const PERL_SERVER = `
$| = 1;
while (my $line = <STDIN>) {
  chomp $line;
  my ($id, $file, @args) = split /\\0/, $line, -1;
  my $pid = fork // die "fork: $!";
  if ($pid == 0) {
    open STDIN, "<", "/dev/null"; open STDOUT, ">", "/dev/null"; open STDERR, ">", "/dev/null";
    %ENV = (PATH => "/usr/bin:/bin");
    chdir "/";
    exec { $file } $file, @args or POSIX::_exit(127);
  }
  print "spawned $id $pid\n";
  waitpid($pid, 0);
  print "exit $id $?\n";
}`;

/** One request to PERL_SERVER: its spawned line, then its exit line. */
class PerlServer {
  readonly #child: ChildProcess;
  readonly #gone = onGone();
  #buf = "";
  #lines: string[] = [];
  #wake: (() => void) | undefined;
  constructor() {
    this.#child = spawn("/usr/bin/perl", ["-MPOSIX", "-e", PERL_SERVER], { stdio: ["pipe", "pipe", "inherit"], env: ENV });
    this.#gone.watch(this.#child, "perl_server");
    this.#child.stdout!.setEncoding("utf8").on("data", (d: string) => {
      this.#buf += d;
      let nl;
      while ((nl = this.#buf.indexOf("\n")) >= 0) {
        this.#lines.push(this.#buf.slice(0, nl));
        this.#buf = this.#buf.slice(nl + 1);
      }
      this.#wake?.();
    });
  }
  get pid(): number {
    return this.#child.pid!;
  }
  async #line(): Promise<string> {
    while (this.#lines.length === 0) await this.#gone.race(new Promise<void>((ok) => (this.#wake = ok)));
    return this.#lines.shift()!;
  }
  async spawn(id: number): Promise<void> {
    this.#child.stdin!.write(`${id}\0${TRUE}\n`);
    const [spawned, exit] = [await this.#line(), await this.#line()];
    if (!spawned.startsWith(`spawned ${id} `) || exit !== `exit ${id} 0`) throw new Error(`perl_server: ${spawned} / ${exit}`);
  }
  stop(): void {
    this.#gone.stopping = true;
    this.#child.stdin!.end();
  }
}

const agentMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

export async function run(_ctx?: unknown, rounds = 7): Promise<Figures> {
  const spawner = new Spawner();
  // The spawner's own flags (spawner.ts), so the Node floor is the same kind of process.
  const node = new Resident(process.execPath, ["--max-semi-space-size=1", "-e", NODE_SIDE]);
  const perl = new Resident("/usr/bin/perl", ["-MPOSIX", "-e", PERL_SIDE]);
  const perlServer = new PerlServer();
  let requests = 0;
  const sides: Record<string, { cpu: number[]; agent: number[] }> = {};
  // What a fork copies grows with the parent's resident memory and its page tables.
  const size: Figures = {};
  const add = (k: string, cpu: number, agent = 0) => ((sides[k] ??= { cpu: [], agent: [] }).cpu.push(cpu / PER_ROUND), sides[k].agent.push(agent / PER_ROUND));
  const FLAGS = process.env.SPAWN_FLOOR_FLAGS;
  const flagged = FLAGS ? new Spawner() : undefined;
  const viaSpawner = async (pipes: boolean, through = spawner) => {
    const p = await through.spawn({ file: TRUE, args: [], cwd: "/", env: ENV }, { detached: false, stdio: pipes ? ["ignore", "pipe", "pipe"] : ["ignore", "ignore", "ignore"] });
    const ends = [...p.pipes.values()].map((s: Readable) => new Promise((ok) => s.once("close", ok).resume()));
    const exit = await new Promise<LaunchedExit>((ok) => p.onExit(ok));
    await Promise.all(ends);
    if (exit.code !== 0) throw new Error(`/bin/true: ${JSON.stringify(exit)}`);
  };
  try {
    // Warm every side: the spawner starts, its pool fills, the residents load.
    for (let i = 0; i < 20; i++) await viaSpawner(i % 2 === 0);
    if (flagged) {
      // Its process starts at its first spawn, with the flags spawner.ts reads then.
      const had = process.env.SBX_SPAWNER_NODE_ARGS;
      process.env.SBX_SPAWNER_NODE_ARGS = `${had ?? ""} ${FLAGS}`;
      try {
        await viaSpawner(false, flagged);
      } finally {
        if (had === undefined) delete process.env.SBX_SPAWNER_NODE_ARGS;
        else process.env.SBX_SPAWNER_NODE_ARGS = had;
      }
      for (let i = 0; i < 20; i++) await viaSpawner(i % 2 === 0, flagged);
    }
    await node.run(20);
    await perl.run(20);
    for (let i = 0; i < 20; i++) await perlServer.spawn(++requests);
    const sp = spawner.pid!;
    const rand = seededRandom(16);
    for (let r = 0; r < rounds; r++) {
      for (const side of shuffle(["spawner", "spawner_pipes", "node", "perl", "perl_server", ...(flagged ? ["spawner_flags"] : [])], rand)) {
        if (side === "spawner_flags") {
          const [t, a] = [schedMs(flagged!.pid!), agentMs()];
          for (let i = 0; i < PER_ROUND; i++) await viaSpawner(false, flagged);
          add(side, schedMs(flagged!.pid!) - t, agentMs() - a);
          continue;
        }
        if (side === "node" || side === "perl") {
          const res = side === "node" ? node : perl;
          const t = schedMs(res.pid);
          await res.run(PER_ROUND);
          add(side, schedMs(res.pid) - t);
          continue;
        }
        if (side === "perl_server") {
          const [t, a] = [schedMs(perlServer.pid), agentMs()];
          for (let i = 0; i < PER_ROUND; i++) await perlServer.spawn(++requests);
          add(side, schedMs(perlServer.pid) - t, agentMs() - a);
          continue;
        }
        const [t, a] = [schedMs(sp), agentMs()];
        for (let i = 0; i < PER_ROUND; i++) await viaSpawner(side === "spawner_pipes");
        add(side, schedMs(sp) - t, agentMs() - a);
      }
    }
    const pids: [string, number][] = [["spawner", sp], ["node", node.pid], ["perl", perl.pid], ...(flagged ? [["spawner_flags", flagged.pid!] as [string, number]] : [])];
    for (const [k, pid] of pids) {
      size[`spawn_floor.${k}_rss_mb`] = { value: round(statusKB(pid) / 1024, 1), unit: "MB" };
      size[`spawn_floor.${k}_page_tables_kb`] = { value: statusKB(pid, "VmPTE"), unit: "KB" };
    }
  } finally {
    node.stop();
    perl.stop();
    perlServer.stop();
    await spawner.dispose();
    await flagged?.dispose();
  }
  const fig = (xs: number[]) => ({ value: round(median(xs), 3), unit: "ms", spread: minMax(xs, 3) });
  const ratio = (a: number[], b: number[]) => {
    const rs = a.map((x, i) => x / b[i]!);
    return { value: round(median(rs)), unit: "x", spread: minMax(rs) };
  };
  const out: Figures = {
    "spawn_floor.spawner_cpu_ms_each": fig(sides.spawner!.cpu),
    "spawn_floor.spawner_pipes_cpu_ms_each": fig(sides.spawner_pipes!.cpu),
    "spawn_floor.agent_cpu_ms_each": fig(sides.spawner!.agent),
    "spawn_floor.agent_pipes_cpu_ms_each": fig(sides.spawner_pipes!.agent),
    "spawn_floor.node_spawn_cpu_ms_each": fig(sides.node!.cpu),
    "spawn_floor.perl_fork_exec_cpu_ms_each": fig(sides.perl!.cpu),
    // Per round: each side's figure over the same round's floor.
    "spawn_floor.perl_server_cpu_ms_each": fig(sides.perl_server!.cpu),
    "spawn_floor.agent_perl_server_cpu_ms_each": fig(sides.perl_server!.agent),
    "spawn_floor.spawner_vs_node_ratio": ratio(sides.spawner!.cpu, sides.node!.cpu),
    "spawn_floor.spawner_vs_perl_ratio": ratio(sides.spawner!.cpu, sides.perl!.cpu),
    "spawn_floor.spawner_pipes_vs_perl_ratio": ratio(sides.spawner_pipes!.cpu, sides.perl!.cpu),
    "spawn_floor.spawner_vs_perl_server_ratio": ratio(sides.spawner!.cpu, sides.perl_server!.cpu),
    ...(flagged && {
      "spawn_floor.spawner_flags_cpu_ms_each": fig(sides.spawner_flags!.cpu),
      "spawn_floor.agent_flags_cpu_ms_each": fig(sides.spawner_flags!.agent),
      "spawn_floor.spawner_flags_vs_spawner_ratio": ratio(sides.spawner_flags!.cpu, sides.spawner!.cpu),
    }),
    ...size,
    "spawn_floor.load_1min": { value: round(loadavg()[0]!), unit: "" },
  };
  return out;
}

if (import.meta.main) console.log(JSON.stringify(await run(undefined, Number(process.argv[2] ?? 7)), null, 2));
