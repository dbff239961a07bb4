// The `local` driver: sandboxes as isolated process trees on this machine. See ../README.md for
// the levels, the on-disk layout and what survives an agent restart.
import { randomBytes } from "node:crypto";
import { connect as tcpConnect, type Socket } from "node:net";
import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { unlink } from "node:fs/promises";
import { arch } from "node:os";
import { basename, join } from "node:path";
import type { SandboxView, SpawnRequest } from "../../runtime/sandbox-view.ts";
import {
  SandboxNotFoundError,
  TerminalError,
  UnsupportedError,
  type DesiredSandbox,
  type Driver,
  type DriverCapabilities,
  type ExecResult,
  type IsolationLevel,
  type SandboxObservation,
  type SnapshotRef,
} from "../driver.ts";
import { cgroupPids, cgroupSetFor, createCgroups, isFrozen, killAndRemove, listCgroupIds, procsFiles, removeParents, setFrozen, type CgroupLayout } from "./cgroups.ts";
import { alive, discoverHolder, holderStatus, signalSandbox, startHolder, StatHandle } from "./holder.ts";
import { restarting, restartWait, started as holderStarted, type RestartState } from "./restart-backoff.ts";
import { EGRESS_MAX_CONNECTIONS, EGRESS_PROXY_PORT, LocalEgress, networkMode, networkOf, proxyEnv, type NetworkMode } from "./egress.ts";
import { parseIp, privateRange } from "../../../schema/egress/address.ts";
import type { TrafficPolicyEntry } from "../../../schema/api/traffic-policy.ts";
import type { SecurityProfileEntry } from "../../../schema/api/security-profile.ts";
import type { NetworkAuditRecord } from "../../../schema/api/network-audit.ts";
import { mountDisk, unmountDisk, unmountDiskSync } from "./disk.ts";
import { SpareDisks } from "./spare-disks.ts";
import { LocalSnapshots } from "./snapshots.ts";
import { bwrapMountArgs, layoutFor, mountsFor, prepareLayout, USERS, volatileDir, type SandboxLayout } from "./layout.ts";
import { caEnv, caInstallScript } from "./egress-l7.ts";
import { removeTree } from "./remove-tree.ts";
import { bwrapRootArgs, HOST_VIEW_IMAGE, mountRoot, rootFor, unmountAndRemoveSandbox, unmountRoot, unmountSandbox, writeIdentity } from "./root-overlay.ts";
import { RootfsStore } from "./rootfs/store.ts";
import { IDENTITY } from "./id-map.ts";
import { shiftOwners } from "./shift-owners.ts";
import { LocalSandboxView } from "./local-view.ts";
import { PortRelay } from "./port-relay.ts";
import { probeHost } from "./probe.ts";
import { seccompProgram } from "./seccomp.ts";
import { SANDBOX_INIT_MODE, sandboxInitImage } from "./sandbox-init.ts";
import { checkSandboxInit } from "./sandbox-init-check.ts";
import { adoptionWarning, holderConditions, type HolderLack } from "./adopted-holders.ts";
import { forgetRecord, readRecord, recordedIds, writeRecord, type FilterKind, type ProcRef, type SandboxRecord } from "./records.ts";
import { SandboxNet, type SandboxNetOptions } from "./sandbox-net.ts";
import { IN_PROCESS, Spawner } from "./spawner.ts";
import type { LaunchedExit } from "../../runtime/process/launcher.ts";
import { UidRanges, type IdRange } from "./uid-range.ts";
import { logger } from "../../lib/log.ts";
import { openStepNet, type StepNet } from "./builder/step-net.ts";
import { chownLayer, GOVERNED_CAPS, SANDBOX_CAPS, guardDir, letOwnersPass, openUserns, unmountUnderSync, usernsUnavailable, volatileBounds, type IdmapMount, type OpenUserns, type OverlayMount } from "./userns.ts";

// The agent's structured logs (JSON in JSON mode): what an operator must see of the driver's start.
const log = logger("local");

export interface LocalDriverOptions {
  /** Where sandboxes (records, layers) and snapshots live. */
  dataDir: string;
  /** Use at most this isolation level (tests run the suite at `process` too). A level above what
   * the host offers is refused with UnsupportedError. */
  level?: IsolationLevel;
  /** Cgroup path (e.g. `/kruise-sandboxes`) under which sandbox cgroups go, the same in every
   * hierarchy. Default: `<the agent's own cgroup>/<cgroupName>`. */
  cgroupParent?: string;
  /** Default `kruise-sandboxes`; tests use their own so they never touch a running agent's. */
  cgroupName?: string;
  /** pids.max when the desired sandbox does not say. */
  defaultPidsMax?: number;
  /** How often pid 1s that no exit event covers are looked at (ms; default PID1_CHECK_MS). Tests
   * pass an hour to show a restart does not wait for the look, or a short one for adopted holders. */
  pid1CheckMs?: number;
  /** Who forks holders and commands. Default: a spawner process of the driver's own (see
   * spawner.ts), or this process itself when KRUISE_LOCAL_SPAWNER=off (for comparison). */
  spawner?: Spawner;
  /** The port on each egress-restricted sandbox's loopback that leads to the traffic-proxy
   * (HTTP_PROXY). Default 3128. */
  egressProxyPort?: number;
  /** Open connections through that port per sandbox at most (each holds a relay process in the
   * sandbox's cgroups). Default 256, and never more than the sandbox's pids limit. */
  egressMaxConnections?: number;
  /** How the traffic-proxy resolves names (for its checks and the sandboxes' DNS). Default: the
   * host's resolver (getaddrinfo). Tests give a stand-in, since they may not ask real DNS. */
  egressResolve?: (host: string) => Promise<string[]>;
  /** The kernel's fast path for sandboxes behind the proxy (../../traffic/README.md): they get an
   * eth0, and destinations the proxy allowed at L4 leave by it, checked inside the sandbox's
   * namespace and again on the host's side of its veth. Needs the sandbox network (`network`).
   * Default on; false (or `KRUISE_EGRESS_FAST_PATH=off`): every connection of a governed sandbox
   * goes through the proxy, it has no eth0, and its namespace no fast-path set or gate. */
  egressFastPath?: boolean;
  /** The conntrack mark bits the fast path's generations use on the host (and in the sandbox's
   * namespace), compared and set under this mask only, so other users of the host's conntrack
   * (a firewall, kube-proxy, a mesh, a VPN) keep theirs: one contiguous run of at least 4 bits
   * that nothing else on the host uses. Default 0xfff00000 (port-relay.ts DEFAULT_CT_MARK_MASK),
   * or `KRUISE_EGRESS_CT_MARK_MASK` (hex). */
  egressCtMarkMask?: number;
  /** A connection to the egress proxy's port (`HTTP_PROXY`) that the proxy allowed at L3/L4 (a
   * CONNECT tunnel, a plain-HTTP request without a body) is handed back to the port relay, which
   * connects to the destination and relays it in the kernel (splice), the proxy out of its bytes'
   * way. Default on; false (or `KRUISE_EGRESS_HANDOFF=off`): every byte goes through the proxy. */
  egressHandoff?: boolean;
  /** The bridge and address range of sandboxes with internet access (sandbox-net.ts), or false
   * to have them share the host's network as before (also `KRUISE_LOCAL_NETNS=off`). */
  network?: SandboxNetOptions | false;
  /** False: no disk of its own per sandbox, writes go to the data directory unbounded (also
   * `KRUISE_LOCAL_DISK=off`, for comparison in benchmarks). */
  disk?: boolean;
  /** Disk size when the desired sandbox does not say (MB). Default 1024, E2B's template default. */
  defaultDiskMB?: number;
  /** Disks to keep formatted and mounted ahead of creates, per size recently asked for
   * (spare-disks.ts). Default 0: each create formats its own. */
  spareDisks?: number;
  /** Where template root filesystems are (rootfs/store.ts; default `~/.cache/sandbox-edge/rootfs`),
   * or false for the host view only (also `KRUISE_LOCAL_ROOTFS=off`). Levels without namespaces
   * always get the host view. */
  rootfs?: RootfsStore | false;
  /** Each sandbox's uids 0..65535 in a user namespace mapped to a host range of its own from
   * `uidBase` (default 2^20; uid-range.ts, README.md "User namespace"), or false for none as
   * before (also `KRUISE_LOCAL_USERNS=off`). */
  userns?: { uidBase?: number } | false;
  /** False: no seccomp filter in sandboxes (also `KRUISE_LOCAL_SECCOMP=off`, for comparison, or
   * on a CPU seccomp.ts has no syscall table for, where the driver refuses to start otherwise). */
  seccomp?: boolean;
  /** False: a sandbox's pid 1 is bwrap's own, over `sleep infinity`, which its tenant can end, as
   * before the host's init (sandbox-init.ts; README.md "The sandbox's pid 1"): for tests of
   * adopting such holders. */
  init?: boolean;
}

const LEVEL_ORDER: IsolationLevel[] = ["kubernetes", "bwrap+cgroup", "bwrap", "process"];
/** The protocol's sandbox ids are [a-z0-9]{1,64}; ids also name directories, cgroups and the hostname. */
const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

/** How often the pid 1s of holders this driver's spawner did not start (adopted from an earlier
 * agent, or outliving a spawner that died) are looked at (#checkWatched); a holder the spawner
 * started tells of its end by its exit (#holderEnded), and with none of the others the timer does
 * not run. Every second cost an idle agent with 120 such sandboxes more than every 5 s in 4 of 4
 * paired rounds, by an amount the runs do not pin down (bench/pid1-watch.ts, README.md "A pid 1
 * that ends", Cost); the price is such a sandbox's reboot up to 5 s late (its commands fail "not
 * running" meanwhile either way). */
const PID1_CHECK_MS = 5000;
/** How soon after a holder's exit a pid 1 still running is looked at once more (#holderEnded):
 * bwrap's init, exiting just after the holder, is gone by then. */
const EXITING_RECHECK_MS = 50;


/** Whether two references name the same process (a pid is reused; with its start time it is not). */
function sameProc(a: ProcRef, b: ProcRef): boolean {
  return a.pid === b.pid && a.start === b.start;
}

/** The seccomp filter a holder for `d` loads, and its commands with it. */
function filterFor(d: DesiredSandbox): FilterKind {
  return d.nestedUserNamespaces ? "nestedUserns" : "default";
}

/** What a sandbox whose pid 1 ended says until it runs again (not ready meanwhile). */
const RESTARTING = "its init process (pid 1) ended: the sandbox starts again, its files kept and its processes gone";

export class LocalDriver implements Driver {
  readonly name = "local";
  readonly capabilities: DriverCapabilities;
  readonly #dataDir: string;
  readonly #cgroups: CgroupLayout | undefined;
  readonly #pidsMax: number;
  readonly #diskMB: number;
  readonly #spares: SpareDisks | undefined;
  readonly #snapshots: LocalSnapshots;
  readonly #locks = new Map<string, Promise<unknown>>();
  /** The last record written or read per sandbox. This driver is the only writer of its records,
   * so what it wrote is what the file says: it reads a file only for a sandbox it has not seen
   * (after a restart), never again what it wrote (issue 16: re-reads were ~1.5 ms per create). */
  readonly #records = new Map<string, SandboxRecord>();
  readonly #spawner: Spawner;
  readonly #egress = new LocalEgress(
    (id) => {
      const rec = this.#record(id);
      return rec && rec.phase !== "Stopped" ? rec.desired : undefined;
    },
    () => (this.#net ? { sandboxes: [this.#net.subnet], host: this.#net.hostNets } : { sandboxes: [], host: [] }),
  );
  readonly #relay: PortRelay;
  readonly #egressPort: number;
  readonly #egressMax: number;
  /** Undefined: sandboxes with internet access share the host's network (`--share-net`). */
  readonly #net: SandboxNet | undefined;
  /** Sandboxes behind the proxy get a veth for the kernel's fast path (options.egressFastPath). */
  readonly #fastPath: boolean;
  /** The seccomp program files a sandbox's processes load (seccomp.ts): the default, and the one
   * of templates with `nestedUserNamespaces`; undefined: none. */
  readonly #seccomp: Record<FilterKind, string> | undefined;
  /** The init program's file every `bwrap` holder execs as the sandbox's pid 1 (sandbox-init.ts);
   * undefined: bwrap's own pid 1 over `sleep infinity` (a CPU without an image, or turned off). */
  readonly #init: string | undefined;
  /** Sandboxes whose holder's pid 1 was looked at once since this driver started (an older
   * agent's may lack the filter or a user namespace), and the claimed ones found so, with what
   * their holder lacks (warned about and counted until their holder restarts). */
  readonly #holderChecked = new Set<string>();
  readonly #outdatedClaimed = new Map<string, HolderLack[]>();
  /** Sandboxes of #outdatedClaimed whose holder this driver has since restarted, with what it lacked. */
  readonly #restarted = new Map<string, HolderLack[]>();
  readonly #rootfs: RootfsStore | undefined;
  /** `base` was asked for before it was built (said once per driver). */
  #hostViewLogged = false;
  /** Undefined: sandboxes have no user namespace (root inside without capabilities). */
  readonly #uids: UidRanges | undefined;
  /** Why there is no user namespace (sandboxes and build steps alike); undefined: there is. */
  readonly #usernsError: string | undefined;
  /** The pid 1 of each running sandbox, set under the sandbox's lock where its record says so
   * (#startHolder, a locked #observeRecord); left out once the driver ends it itself. */
  readonly #watched = new Map<string, StatHandle>();
  /** Of #watched, those no exit event will tell of (adopted holders, or a dead spawner's): the
   * timer (#watchTimer) looks at these, and runs only while there are any. */
  readonly #timed = new Set<string>();
  /** Of #timed, those timed only while frozen (a Freeze pause): their holder, frozen with them
   * (in their cgroup, or SIGSTOPped with them), can neither reap pid 1 nor exit, so no exit event
   * would come before the thaw. */
  readonly #timedFrozen = new Set<string>();
  /** Sandboxes whose ended pid 1 (#pid1Ended) has been handed to their lock. */
  readonly #ending = new Set<string>();
  /** Per sandbox, its last holder start and the backoff of its restarts (restart-backoff.ts). */
  readonly #restarts = new Map<string, RestartState>();
  #watchTimer: NodeJS.Timeout | undefined;
  readonly #checkMs: number;
  /** closeHelpers ran: no pid 1 is watched any more (#watch). */
  #closed = false;
  #changed: ((id: string) => void) | undefined;

  constructor(opts: LocalDriverOptions) {
    const envMask = process.env.KRUISE_EGRESS_CT_MARK_MASK;
    this.#relay = new PortRelay({ proxySocket: this.#egress.socket, ctMarkMask: opts.egressCtMarkMask ?? (envMask ? Number(envMask.startsWith("0x") ? envMask : `0x${envMask}`) : undefined) });
    this.#dataDir = opts.dataDir;
    this.#checkMs = opts.pid1CheckMs ?? PID1_CHECK_MS;
    this.#pidsMax = opts.defaultPidsMax ?? 4096;
    this.#diskMB = opts.defaultDiskMB ?? 1024;
    this.#egressPort = opts.egressProxyPort ?? EGRESS_PROXY_PORT;
    this.#egressMax = opts.egressMaxConnections ?? EGRESS_MAX_CONNECTIONS;
    if (opts.egressResolve) this.#egress.resolve = opts.egressResolve;
    this.#egress.handoff = opts.egressHandoff ?? process.env.KRUISE_EGRESS_HANDOFF !== "off";
    this.#egress.persistIn(this.#dataDir);
    this.#spawner = opts.spawner ?? new Spawner(process.env.KRUISE_LOCAL_SPAWNER === "off" ? IN_PROCESS : undefined);
    this.#spawner.warm();
    const disk = opts.disk !== false && process.env.KRUISE_LOCAL_DISK !== "off";
    const probe = probeHost({ cgroupName: opts.cgroupName ?? "kruise-sandboxes", cgroupParent: opts.cgroupParent, want: opts.level, disk });
    if (opts.level && LEVEL_ORDER.indexOf(opts.level) < LEVEL_ORDER.indexOf(probe.capabilities.level)) {
      throw new UnsupportedError(`isolation level ${opts.level}`, `this host offers ${probe.capabilities.level}: ${probe.capabilities.notes.join("; ")}`);
    }
    this.#cgroups = probe.cgroups;
    const netOff = opts.network === false || process.env.KRUISE_LOCAL_NETNS === "off";
    const net = probe.capabilities.networkIsolation && !netOff ? SandboxNet.open(opts.network || {}) : undefined;
    this.#net = typeof net === "string" ? undefined : net;
    // On unless turned off: enforced inside the sandbox's namespace and, on the host's side of
    // its veth, by a guard nothing in the sandbox reaches (port-relay.pl `veth_tables`).
    this.#fastPath = this.#net !== undefined && (opts.egressFastPath ?? process.env.KRUISE_EGRESS_FAST_PATH !== "off");
    // Off, the proxy never hands anything to the kernel: no epochs to bump, no relay commands.
    if (this.#fastPath) {
      this.#egress.fastPath = {
        // Only a governed sandbox whose veth is there has a way out besides the proxy; a private
        // address is dropped on the host's bridge (sandbox-net.ts) even when allowOut names it:
        // the proxy keeps it.
        admit: (id, ip, port, seconds) => {
          const rec = this.#record(id);
          const addr = parseIp(ip);
          if (!rec?.net?.veth || rec.phase === "Stopped" || this.#mode(rec.desired) !== "proxy" || !addr || addr.v6 || privateRange(addr)) return;
          this.#relay.fastAdmit(id, ip, port, seconds);
        },
        flush: (id, endOpen) => this.#relay.fastFlush(id, endOpen),
      };
    }
    const netNote = typeof net === "string" ? [`sandboxes with internet access share the host's network and its loopback: ${net}`] : [];
    const usernsError = probe.capabilities.level === "process" ? "no namespaces at process level" : (usernsUnavailable(opts.userns === false) ?? letOwnersPass(this.#dataDir));
    this.#usernsError = usernsError;
    this.#uids = usernsError ? undefined : new UidRanges((opts.userns || {}).uidBase);
    const usernsNote = usernsError
      ? `no user namespace: root inside has no capabilities and cannot use sudo (${usernsError})`
      : "user namespace: each sandbox's uids 0..65535 are a host range of its own; root inside has a container's capabilities there and none on the host";
    // Written once per start, as root, beside the records: bwrap and enter.pl read it as root.
    const program = probe.capabilities.level === "process" || opts.seccomp === false ? undefined : seccompProgram();
    if (program) {
      this.#seccomp = { default: join(this.#dataDir, "seccomp.bpf"), nestedUserns: join(this.#dataDir, "seccomp-nested-userns.bpf") };
      mkdirSync(this.#dataDir, { recursive: true });
      for (const [file, bytes] of [[this.#seccomp.default, program], [this.#seccomp.nestedUserns, seccompProgram(process.env, { nestedUserNamespaces: true })!]] as const) {
        writeFileSync(`${file}.tmp`, bytes, { mode: 0o600 });
        renameSync(`${file}.tmp`, file);
      }
    }
    // Written as root, beside the records; the spawner opens it for bwrap.
    const image = probe.capabilities.level === "process" || opts.init === false ? undefined : sandboxInitImage(arch());
    let initNote: string[] = [];
    if (image) {
      const init = join(this.#dataDir, "sandbox-init");
      mkdirSync(this.#dataDir, { recursive: true });
      // Left as it is when it already is this image: replaced, every running sandbox's pid 1 would
      // show as a "(deleted)" executable, which host scanners flag.
      if (!sameInit(init, image)) {
        // Its mode set apart from the write: the umask, or a leftover .tmp, would keep another.
        writeFileSync(`${init}.tmp`, image, { mode: 0o600 });
        chmodSync(`${init}.tmp`, SANDBOX_INIT_MODE);
        renameSync(`${init}.tmp`, init);
      }
      // An old kernel or a noexec data dir: the shape before the init, said once here, rather than
      // every sandbox's start failing (sandbox-init-check.ts). Not a refusal: that shape is what
      // every CPU without an image runs, and refusing would stop an agent that ran before the init.
      // A check that could not tell (twice) keeps the init: a passing failure at start must not
      // downgrade every sandbox for the agent's life.
      const check = checkSandboxInit(init);
      if (check.unusable) {
        const note = `no sandbox init: ${check.unusable}; each sandbox's pid 1 is bwrap's own over \`sleep infinity\`, which its tenant can end (README.md "The sandbox's pid 1")`;
        initNote = [note];
        // At warn, and in the isolation the agent reports to the edge (capabilities.sandboxInit).
        log.warn(note);
      } else {
        if (check.unsure) log.warn(`the sandbox init was kept though its check could not tell, twice: ${check.unsure}; a sandbox whose start it fails says why`);
        this.#init = init;
      }
    }
    const seccompNote = program
      ? "seccomp: every sandbox process runs under the driver's filter, which refuses new user namespaces unless the template has nestedUserNamespaces (README.md \"Seccomp\"; an older agent's unfiltered holders: warm ones restarted, claimed ones logged and reported as SeccompFiltered False until they restart)"
      : `no seccomp filter: ${probe.capabilities.level === "process" ? "process level" : "turned off (KRUISE_LOCAL_SECCOMP=off)"}`;
    this.capabilities = { ...probe.capabilities, notes: [...probe.capabilities.notes, ...netNote, usernsNote, seccompNote, ...initNote], ...(initNote.length ? { sandboxInit: false as const } : {}) };
    const rootsOff = opts.rootfs === false || process.env.KRUISE_LOCAL_ROOTFS === "off" || this.capabilities.level === "process";
    this.#rootfs = rootsOff ? undefined : opts.rootfs || new RootfsStore();
    // It makes every sandbox's veth: the first create should not wait for perl to start.
    if (this.#net) this.#relay.warm();
    mkdirSync(join(this.#dataDir, "sandboxes"), { recursive: true });
    this.#snapshots = new LocalSnapshots(this.#dataDir, this.#spawner);
    this.#spares = this.capabilities.disk === "quota" && opts.spareDisks ? new SpareDisks(this.#dataDir, this.#spawner, opts.spareDisks) : undefined;
    // What a previous agent was still deleting when it stopped.
    mkdirSync(join(this.#dataDir, "trash"), { recursive: true });
    const trash = readdirSync(join(this.#dataDir, "trash")).map((name) => join(this.#dataDir, "trash", name));
    for (const dir of trash) {
      // Not unmounted when it was moved there (still busy then): never delete through a mount.
      unmountDiskSync(join(dir, "root"));
      unmountUnderSync(join(dir, "layers"));
      unmountDiskSync(volatileDir(dir));
      unmountDiskSync(join(dir, "disk"));
    }
    if (trash.length) this.#emptyTrash(trash);
  }

  /** `listener` hears of each sandbox whose pid 1 ended by itself (killed from the host, the OOM
   * killer took it; in an older agent's holder, root inside ended its `sleep` or ptrace-killed it): as its holder's exit is heard, or within about
   * PID1_CHECK_MS for a holder no exit event covers (#timed). The agent runs a pass, whose
   * `ensure` starts it again (after the backoff of restart-backoff.ts). */
  onChange(listener: (id: string) => void): void {
    this.#changed = listener;
  }

  /** One `/proc/<pid>/stat` read per sandbox whose holder no exit event covers (#timed): an
   * adopted holder is no child of this agent's spawner, nor is one whose spawner died. */
  #checkWatched(): void {
    for (const id of this.#timed) {
      const handle = this.#watched.get(id)!;
      if (handle.ended()) this.#pid1Ended(id, handle.ref);
    }
  }

  /** The spawner heard the holder of `ref` (sandbox `id`'s pid 1 then) exit, or died itself,
   * leaving nobody to tell of that exit (holder.ts onEnd). */
  #holderEnded(id: string, ref: ProcRef): void {
    if (this.#closed) return;
    const handle = this.#watched.get(id);
    // Stale: a holder the driver ended itself (a stop or destroy takes it out of #watched before
    // its kill) or one replaced since.
    if (!handle || !sameProc(handle.ref, ref)) return;
    // At `process` level the holder is pid 1. At `bwrap` levels the outer bwrap exits with the
    // init (`--as-pid-1`); in an older agent's holder, as soon as bwrap's init reports its first
    // child's (`sleep`'s) end, without waiting for init, which may still be exiting, or live on
    // with other children (an orphan reparented to it).
    if (handle.ended()) return this.#pid1Ended(id, ref);
    this.#timedFrozen.delete(id); // timed from now on, thawed or not
    // Its pid 1 runs on with nothing left to tell of its end (a holder killed from the host, the
    // spawner gone, an init kept by an orphan): the timer looks at it. One look soon after, so
    // that an init still exiting is not left for the timer's next look.
    this.#time(id, true);
    setTimeout(() => {
      const now = this.#watched.get(id);
      if (!this.#closed && now && sameProc(now.ref, ref) && now.ended()) this.#pid1Ended(id, ref);
    }, EXITING_RECHECK_MS).unref();
  }

  /** The pid 1 `ref` of sandbox `id` ended: looked at again under the sandbox's lock, after any
   * pass under way (which may be what ended it: a stop or destroy takes it out of #watched
   * first), and if the sandbox has failed, its listener is told. */
  #pid1Ended(id: string, ref: ProcRef): void {
    if (this.#ending.has(id)) return;
    this.#ending.add(id);
    void this.#locked(id, async () => {
      this.#ending.delete(id);
      // The driver stopped while this waited: nothing is watched or told any more.
      if (this.#closed) return;
      const rec = this.#record(id);
      // Gone, stopped, or a holder other than the one watched: nothing of this entry to report.
      if (!rec || (rec.phase !== "Running" && rec.phase !== "Frozen") || !rec.nsInit || !sameProc(rec.nsInit, ref)) {
        const handle = this.#watched.get(id);
        if (handle && sameProc(handle.ref, ref)) this.#unwatch(id);
        return;
      }
      if (this.#observeRecord(rec, false, true).phase !== "Failed") return;
      // The pass it starts restarts it (ensure), and its start watches the new pid 1.
      this.#unwatch(id);
      this.#changed?.(id);
    }).catch((err: Error) => console.warn(`local driver: sandbox ${id}: ${err.message}`));
  }

  /** Whether `ref`, sandbox `id`'s pid 1 as recorded, runs (holder.ts alive): through its watch's
   * descriptor when it is the one watched (StatHandle.ended: one read, where a look by pid opens,
   * reads and parses /proc/<pid>/stat; ~8 looks per create + refill), else by pid. */
  #alive(id: string, ref: ProcRef | undefined): boolean {
    if (!ref) return false;
    const handle = this.#watched.get(id);
    return handle && sameProc(handle.ref, ref) ? !handle.ended() : alive(ref);
  }

  /** Whether the timer looks at sandbox `id`'s pid 1 (`on`); it runs while it looks at any. */
  #time(id: string, on: boolean): void {
    if (on) this.#timed.add(id);
    else this.#timed.delete(id);
    if (this.#timed.size > 0) this.#watchTimer ??= setInterval(() => this.#checkWatched(), this.#checkMs).unref();
    else if (this.#watchTimer) {
      clearInterval(this.#watchTimer);
      this.#watchTimer = undefined;
    }
  }

  /** Unmounts and deletes the spare disks (an agent that stops its sandboxes leaves no loop
   * device mounted; the next start makes new spares). */
  async releaseSpares(): Promise<void> {
    await Promise.all([this.#spares?.dispose(), this.#snapshots.dispose()]);
  }

  /** Removes the driver's (empty) parent cgroups and spare disks and stops its spawner; sandboxes
   * themselves are left alone. Done when the spare disks are (the data directory may go next). */
  async dispose(): Promise<void> {
    this.removeEmptyParents();
    await Promise.all([this.#spares?.dispose(), this.#snapshots.dispose(), ...this.#trashRemovals]);
    void this.#spawner.dispose();
    this.closeHelpers();
  }

  /** Removes the parent cgroups this driver made at start, each only if it is empty: the kernel
   * refuses to remove a cgroup holding a process or a child (a kept sandbox's). The layout is the
   * one found at start, so a driver that runs without cgroups (`--level bwrap`/`process`) touches
   * none, and nothing is made or enabled on the way (as finding the layout again would). */
  removeEmptyParents(): void {
    if (this.#cgroups) removeParents(this.#cgroups);
  }

  /** Stops this process's port relay and egress proxy and removes their socket directories: an
   * agent that exits leaving its sandboxes running (they are adopted by the next one, which starts
   * helpers of its own) leaves nothing of them in /tmp. */
  closeHelpers(): void {
    this.#closed = true;
    for (const id of [...this.#watched.keys()]) this.#unwatch(id);
    this.#relay.dispose();
    this.#egress.dispose();
  }

  /** Where a sandbox's files are: on its own disk when its record says it has one. */
  #layout(id: string, rec = this.#record(id)): SandboxLayout {
    return layoutFor(this.#dataDir, id, rec?.disk !== undefined, rec?.root !== undefined);
  }

  /** The root a new sandbox of `image` gets (undefined: the host view), or a TerminalError. */
  #rootFor(image: string) {
    const root = rootFor(this.#rootfs, image);
    if (!root && this.#rootfs && !this.#hostViewLogged) {
      this.#hostViewLogged = true;
      console.warn(`local driver: template ${HOST_VIEW_IMAGE} is not built yet in ${this.#rootfs.root}; its sandboxes get the view of the host until it is (npm start builds it)`);
    }
    return root;
  }

  /** Mounts a rooted sandbox's overlay (its disk first), writing its identity into a new one. */
  async #mountRoot(rec: SandboxRecord, layout: SandboxLayout, ids?: IdRange, idmap?: (mounts: IdmapMount[], overlay: OverlayMount) => Promise<void>): Promise<void> {
    if (!rec.root) return;
    if (!this.#rootfs) throw new UnsupportedError(`image ${rec.root.image}`, "this driver was started without root filesystems");
    if (await mountRoot(this.#spawner, this.#rootfs, rec.root, layout, ids, idmap)) writeIdentity(layout.merged, rec.id, ids);
  }

  /** Mounts the sandbox's disk (formatting it at first use) before anything touches its files. */
  async #mountDisk(rec: SandboxRecord): Promise<void> {
    if (!rec.disk) return;
    const layout = this.#layout(rec.id, rec);
    await mountDisk(this.#spawner, layout.image, layout.disk, rec.disk.sizeMB);
  }

  #save(rec: SandboxRecord): void {
    writeRecord(layoutFor(this.#dataDir, rec.id).record, rec);
    this.#records.set(rec.id, rec);
  }

  #record(id: string): SandboxRecord | undefined {
    const known = this.#records.get(id);
    if (known) return known;
    const layout = layoutFor(this.#dataDir, id);
    const read = readRecord(layout.record);
    if (!read) return undefined;
    // First read by this driver: a sandbox an older agent made may have an open directory.
    guardDir(layout.dir, read.userns);
    this.#records.set(id, read);
    return read;
  }

  /** Serialises operations on one sandbox; different sandboxes proceed in parallel. */
  async #locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#locks.get(id) ?? Promise.resolve();
    const next = prev.catch(() => {}).then(fn);
    this.#locks.set(id, next);
    try {
      return await next;
    } finally {
      if (this.#locks.get(id) === next) this.#locks.delete(id);
    }
  }

  ensure(desired: DesiredSandbox): Promise<SandboxObservation> {
    if (!ID_PATTERN.test(desired.id)) return Promise.reject(new Error(`invalid sandbox id ${JSON.stringify(desired.id)}`));
    const mode = this.#mode(desired);
    if (mode !== "host" && !this.capabilities.networkIsolation) {
      const what = mode === "none" ? "allowInternetAccess=false" : "network egress rules";
      return Promise.reject(new UnsupportedError(what, `no network namespace at level ${this.capabilities.level}`));
    }
    return this.#locked(desired.id, () => this.#converge(desired));
  }

  async #converge(d: DesiredSandbox): Promise<SandboxObservation> {
    let rec = this.#record(d.id);
    const created = !rec;
    if (!rec) {
      const snap = d.restoreFrom && this.#snapshots.need(d.restoreFrom.id);
      // A disk snapshot is the new sandbox's disk, at the snapshot's size.
      const fromImage = snap?.kind === "disk" && this.capabilities.disk === "quota";
      const disk = this.capabilities.disk === "quota" ? { sizeMB: fromImage ? snap.sizeMB! : (d.resources.diskSizeMB ?? this.#diskMB) } : undefined;
      // A sandbox made from a snapshot mounts the layers its source had (its upper was made over them).
      const root = snap ? snap.root : this.#rootFor(d.template);
      rec = { id: d.id, generation: d.generation, level: this.capabilities.level, desired: d, createdAt: new Date().toISOString(), phase: "Pending", disk, root };
      const layout = this.#layout(d.id, rec);
      // A spare disk, or a snapshot's copy made ahead, arrives as the whole sandbox directory, mounted.
      const fresh = !existsSync(layout.dir);
      const taken = fresh && (fromImage ? this.#snapshots.takeCopy(snap, layout.dir) : disk && !snap && this.#spares?.take(disk.sizeMB, layout.dir));
      if (!taken) mkdirSync(layout.dir, { recursive: true });
      if (fromImage && !existsSync(layout.image)) await this.#snapshots.copyImage(snap, layout.image, layout.disk);
      // Leased only now, with no wait before the record naming them is saved: a lease older than
      // its grace (60 s) whose record does not name it is another driver's to take over, and a
      // large snapshot's copy can take longer than that (address-leases.ts).
      if (this.#uids) rec.userns = this.#uids.keep(undefined, layout.record);
      guardDir(layout.dir, rec.userns);
      // What its holder will be recorded with is in this first write already, so the holder's
      // start writes once, when it runs (issue 16: a record write is ~0.3 ms of the agent's CPU).
      if (wantsProcesses(d)) rec = { ...rec, ...this.#holderPlan(rec) };
      this.#save(rec);
      await this.#mountDisk(rec);
      // The host view's identity files; a root's are written where it is first mounted
      // (writeIdentity), which a work directory copied from the snapshot's disk would hide.
      if (!root) prepareLayout(layout, d.id);
      else if (snap) await removeTree([layout.work], this.#spawner);
      if (snap && !fromImage) await this.#snapshots.fillLayer(snap, layout.layer);
      // The snapshot's files carry its source's host ids: moved into this sandbox's range.
      if (snap) await shiftOwners(layout.layer, snap.userns ?? IDENTITY, rec.userns ?? IDENTITY);
    }
    const layout = this.#layout(d.id, rec);
    // A holder's network namespace is fixed when it starts: a sandbox that moves between the
    // host's network and one of its own (a warm member claimed with allowInternetAccess: false or
    // with egress rules, where sandboxes with internet access share the host's network) gets a new
    // holder, and its processes with it. Between internet access in a namespace of its own, no
    // network and rules, only its veth (#syncNet) and the proxy listener (#syncEgress) change.
    const networkChanged = this.#sharesHostNet(rec) !== this.#wantsHostNet(d) && rec.phase !== "Stopped" && rec.level !== "process";
    // Recreate (update ops): a claimed sandbox moved to another revision gets a new holder, and
    // processes, on the files it has; a stopped one gets it when it next starts.
    const recreate = d.claimed === true && rec.desired.claimed === true && d.revision !== undefined && rec.desired.revision !== undefined && d.revision !== rec.desired.revision && rec.phase !== "Stopped";
    // CheckpointRestore (update ops): the files go back to the snapshot's, once per snapshot id.
    // Done before the new desired state is recorded, so a restart midway does it again.
    if (!created && d.restoreFs && d.restoreFs.id !== rec.desired.restoreFs?.id) rec = await this.#fillFrom(rec, d.restoreFs);
    // The same for a sandbox's own rules (updateNetwork, a claim): its fast path is emptied first,
    // after the epoch moved on (a connection decided before cannot admit after the flush); when
    // L7 rules start to apply, its fast-path connections end too (nothing long-lived stays
    // uninspected).
    if (!created && networkOf(rec.desired) !== networkOf(d)) {
      this.#egress.policyChanging(d.id);
      await this.#flushFast(d.id, this.#egress.l7.wants(d) && !this.#egress.l7.wants(rec.desired));
    }
    rec = { ...rec, generation: d.generation, desired: d };
    // A record made just above already says this.
    if (!created) this.#save(rec);
    // A holder an older agent started may run without the filter (a filtered command may ptrace
    // it and make the calls the filter refuses) or in the host's user namespace (root inside is
    // the host's root). An unclaimed warm member is nobody's yet: it gets a new holder. A claimed
    // one's processes are a user's work (and so is one whose caller does not say, `claimed`
    // unset): never killed for this; it is logged with a count until its holder restarts (a Stop
    // pause, an update ops recreate), which brings what it lacked.
    const lacks = created ? [] : this.#outdatedHolder(rec);
    const replace = lacks.length > 0 && d.claimed === false;
    if (lacks.length) {
      if (!replace) this.#outdatedClaimed.set(d.id, lacks);
      console.warn(adoptionWarning(d.id, lacks, replace, this.#outdatedClaimed.size));
    }
    if (networkChanged || recreate || replace) {
      await this.#endProcesses(rec);
      // A replaced warm member is a new one to the agent: created before the agent started, it
      // would read as adopted, whose template start command already runs (start-commands.ts),
      // and come back without it.
      rec = { ...rec, phase: "Stopped", holder: undefined, nsInit: undefined, ...(replace ? { createdAt: new Date().toISOString() } : {}) };
      this.#save(rec);
    }
    // A record made in this pass has no holder to look for (one starts only once its record
    // names it): at a level without cgroups the look is a read of every process's environment
    // on the host, ~3 ms of the agent's CPU per warm member made (issue 16).
    let obs = this.#observeRecord(rec, created, true);
    const wantProcesses = wantsProcesses(d);
    if (wantProcesses && (obs.phase === "Stopped" || obs.phase === "Failed" || obs.phase === "Pending")) {
      if (obs.phase === "Failed") {
        // Its pid 1 ended (killed from the host, the OOM killer took it, root inside ended an older
        // agent's holder's sleep): a reboot, files
        // kept, after the backoff when it ended soon after its last start. Not ready meanwhile.
        // The agent's next pass for it comes when the wait ends (retryAfterMs): a pass per 250 ms
        // for up to a minute would write its record and look for its holder each time.
        const wait = this.#restartWait(d.id);
        if (wait) return restarting(obs, RESTARTING, wait);
        await this.#endProcesses(rec);
      }
      rec = await this.#start(this.#record(d.id) ?? rec, created);
      // Its cgroup was made by this start, thawed (its parent, the driver's, is never frozen).
      obs = this.#observeRecord(rec, false, true, false);
    }
    // The freeze state of its cgroup as this pass knows it (read, made, or set and waited for),
    // which only this driver changes, under the sandbox's lock: the pass's last look need not read
    // cgroup.events again (issue 16: 4 reads per create + refill, 1 now).
    let frozen = obs.phase === "Paused" ? true : obs.phase === "Running" ? false : undefined;
    if (d.state === "Running" && obs.phase === "Paused") {
      await this.#thaw(rec);
      frozen = false;
    }
    if (d.state === "Paused" && d.pauseStrategy === "Freeze" && obs.phase === "Running") {
      await this.#freeze(rec);
      frozen = true;
    }
    if (d.state === "Paused" && d.pauseStrategy === "Stop" && obs.phase !== "Stopped") {
      await this.#endProcesses(rec);
      rec = { ...rec, phase: "Stopped", holder: undefined, nsInit: undefined };
      this.#save(rec);
      // Its files stay in the image; a stopped sandbox holds no loop device.
      await unmountSandbox(this.#spawner, layout.merged, layout.disk);
    }
    const final = await this.#syncNetwork(this.#record(d.id) ?? rec);
    const seen = this.#observeRecord(final, false, true, frozen);
    // Its holder died during this very pass (a start that lost a race on a loaded host): not a
    // verdict on the sandbox. Retried, the next pass starts it again.
    if (wantProcesses && seen.phase === "Failed") throw new Error(`sandbox ${d.id}: ${seen.message ?? "failed"} while it was being started; starting it again`);
    return seen;
  }

  /** What the running holder of an adopted sandbox lacks that this driver gives its own: the
   * seccomp filter where it loads one (`Seccomp: 0` in the kernel's status of its pid 1), a user
   * namespace where it makes them (a record without a range), the init where it has one (pid 1 is
   * bwrap's own). Looked at once per sandbox per
   * driver start; a holder this driver started is not looked at. */
  #outdatedHolder(rec: SandboxRecord): HolderLack[] {
    if (rec.level === "process" || rec.phase === "Stopped" || !rec.nsInit || this.#holderChecked.has(rec.id)) return [];
    const status = holderStatus(rec.nsInit, this.#init);
    // Gone: the pass starts a new one, as this driver starts them.
    if (status === undefined) return [];
    this.#holderChecked.add(rec.id);
    const lacks: HolderLack[] = [];
    if (this.#seccomp && status.seccomp === 0) lacks.push("seccomp");
    if (this.#uids && !rec.userns) lacks.push("userns");
    // bwrap's own pid 1 (an older agent's holder, over `sleep`): told by the file it runs, the
    // kernel's link, never by its name (root inside can ptrace that bwrap and rename it `init`).
    if (this.#init && !status.init) lacks.push("init");
    return lacks;
  }

  /** The network a sandbox wanting `d` gets: TrafficPolicies that select it put it behind the proxy. */
  #mode(d: DesiredSandbox): NetworkMode {
    return networkMode(d, this.#egress.governing(d) !== undefined, this.#egress.l7.wants(d));
  }

  /** Replaces the TrafficPolicies in force (the edge's, agent link) and moves each sandbox whose
   * network that changes (behind the proxy or out from behind it); open connections of governed
   * sandboxes are judged again. */
  async setTrafficPolicies(entries: TrafficPolicyEntry[]): Promise<void> {
    await this.#policiesChanged("traffic policies", () => this.#egress.setTraffic(entries));
  }

  /** Replaces the SecurityProfiles in force (the edge's, agent link): a sandbox a profile newly
   * selects goes behind the proxy and gets its CA; the next request is judged by the new set. */
  async setSecurityProfiles(entries: SecurityProfileEntry[]): Promise<void> {
    await this.#policiesChanged("security profiles", () => this.#egress.setProfiles(entries));
  }

  setNetworkAudit(sink: (record: NetworkAuditRecord) => void): void {
    this.#egress.l7.setAudit(sink);
  }

  /** After `change`, converges again each sandbox whose network or L7 need it changed (the sets
   * come with every welcome, so the others are only judged again). */
  async #policiesChanged(what: string, change: () => void): Promise<void> {
    const need = (r: SandboxRecord) => `${this.#mode(r.desired)}:${this.#egress.l7.wants(r.desired)}`;
    const before = new Map([...this.#records.values()].map((r) => [r.id, need(r)]));
    const inspected = new Set([...this.#records.values()].filter((r) => this.#egress.l7.wants(r.desired)).map((r) => r.id));
    // Nothing the old policy put on the kernel's fast path outlives it (revalidate then ends the
    // fast-path connections the new one denies); the epoch first, so a connection decided before
    // cannot admit after the flush.
    for (const id of this.#records.keys()) this.#egress.policyChanging(id);
    await Promise.all([...this.#records.keys()].map((id) => this.#flushFast(id, false)));
    change();
    // L7 rules that now apply end the sandbox's fast-path connections, whatever their destination.
    await Promise.all([...this.#records.values()].filter((r) => !inspected.has(r.id) && this.#egress.l7.wants(r.desired)).map((r) => this.#flushFast(r.id, true)));
    for (const rec of this.#records.values()) {
      if (rec.phase === "Stopped" || before.get(rec.id) === need(rec)) {
        this.#egress.revalidate(rec.id);
        continue;
      }
      await this.#locked(rec.id, async () => {
        const now = this.#record(rec.id);
        if (now) await this.#converge(now.desired);
      }).catch((err) => console.error(`local: ${rec.id}: ${what}: ${(err as Error).message}`));
    }
  }

  /** The relay's `unfast` for the sandbox, when there is a fast path at all. */
  async #flushFast(id: string, endOpen: boolean): Promise<void> {
    if (this.#fastPath) await this.#relay.fastFlush(id, endOpen);
  }

  /** Sandboxes with their team and labels (what a TrafficPolicy's status lists). */
  trafficTargets(): { id: string; team: string | null; labels: Record<string, string> }[] {
    return [...this.#records.values()].filter((r) => r.phase !== "Stopped").map((r) => ({ id: r.id, team: r.desired.namespace ?? null, labels: r.desired.labels ?? {} }));
  }

  /** Whether sandboxes wanting `d` start on the host's network. */
  #wantsHostNet(d: DesiredSandbox): boolean {
    return this.capabilities.level !== "process" && !this.#net && this.#mode(d) === "host";
  }

  #sharesHostNet(rec: SandboxRecord): boolean {
    return rec.level !== "process" && (rec.sharesHostNet ?? this.#mode(rec.desired) === "host");
  }

  /** The sandbox's veth and proxy listener as its mode wants them. Behind the proxy, the listener
   * (with its redirect and the fast path's gate, port-relay.pl) comes before the veth, so eth0 is
   * never there without them; the veth of one leaving the proxy goes before the listener. */
  async #syncNetwork(rec: SandboxRecord): Promise<SandboxRecord> {
    if (this.#mode(rec.desired) === "proxy") {
      await this.#syncEgress(rec);
      const next = await this.#syncNet(rec);
      // A relay that restarts reopens the listener: with an eth0 there, it needs the leased address.
      if (next.net?.veth) this.#relay.egressAddress(next.id, next.net.address);
      return next;
    }
    const final = await this.#syncNet(rec);
    await this.#syncEgress(final);
    return final;
  }

  /** Whether a sandbox wanting `d` has a veth: with internet access in a namespace of its own, or
   * behind the proxy for the kernel's fast path (only destinations the proxy allowed leave by it). */
  #wantsVeth(d: DesiredSandbox): boolean {
    const mode = this.#mode(d);
    return mode === "host" || (mode === "proxy" && this.#fastPath);
  }

  /** A running sandbox with internet access and a namespace of its own, or behind the proxy, has
   * its veth; any other running one has none. Also gives back a veth the holder lost (a restarted holder is a new
   * namespace) and keeps the address the sandbox had. */
  async #syncNet(rec: SandboxRecord): Promise<SandboxRecord> {
    const net = this.#net;
    if (!net || rec.phase === "Stopped" || rec.level === "process" || this.#sharesHostNet(rec) || !rec.nsInit || !this.#alive(rec.id, rec.nsInit)) return rec;
    const want = this.#wantsVeth(rec.desired);
    const has = net.attached(rec.net, rec.nsInit);
    if (want && has && !this.#tabled.has(rec.net!.veth!)) {
      // Adopted (made before this driver started): an older agent may have made it without the
      // host's table, which only a new veth got. Put in place once per driver; the guard of a
      // governed one came with its listener (#syncEgress), which a restarted relay opens again.
      await net.retable(rec.net!.veth!, rec.net!.address, this.#relay);
      this.#tabled.add(rec.net!.veth!);
    }
    if (want === has) return rec;
    let next: SandboxRecord;
    if (want) {
      const address = net.keep(rec.net?.address, layoutFor(this.#dataDir, rec.id).record);
      // Recorded before it is used, so a restart between the two does not lose the lease.
      this.#save({ ...rec, net: { address } });
      try {
        next = { ...rec, net: { address, veth: await net.attach(rec.nsInit, address, this.#relay) } };
        this.#tabled.add(next.net!.veth!);
      } catch (err) {
        if (address !== rec.net?.address) {
          net.release(address, layoutFor(this.#dataDir, rec.id).record);
          this.#save({ ...rec, net: undefined });
        }
        throw err;
      }
    } else {
      await net.detach(rec.net!.veth!, this.#relay);
      this.#tabled.delete(rec.net!.veth!);
      next = { ...rec, net: { address: rec.net!.address } };
    }
    this.#save(next);
    return next;
  }

  /** A running sandbox with egress rules has the proxy on its loopback; any other has none.
   * Also re-opens a listener an agent restart lost (the relay died with the old agent), and ends
   * open connections that the rules as they are now deny. */
  async #syncEgress(rec: SandboxRecord): Promise<void> {
    const running = rec.phase !== "Stopped" && rec.level !== "process" && rec.nsInit !== undefined && this.#alive(rec.id, rec.nsInit);
    if (!running || this.#mode(rec.desired) !== "proxy") {
      await this.#relay.closeEgress(rec.id);
      this.#egress.revalidate(rec.id);
      return;
    }
    await this.#egress.start();
    const maxConnections = Math.min(this.#egressMax, rec.desired.resources.pidsMax ?? this.#pidsMax);
    await this.#relay.listenEgress(rec.id, rec.nsInit!, this.#egressPort, { cgroupProcs: rec.cgroups ? procsFiles(rec.cgroups) : [], maxConnections }, this.#fastPath, rec.net?.veth ? rec.net.address : undefined);
    this.#egress.revalidate(rec.id);
    if (this.#egress.l7.wants(rec.desired)) await this.#installCa(rec.id, rec.nsInit!.pid);
  }

  /** Host ends of veths whose host table this driver made or put in place again (#syncNet). */
  readonly #tabled = new Set<string>();

  /** Sandboxes (by their namespace's pid) whose trust store has their CA. */
  readonly #caInstalled = new Set<string>();

  /** Puts the sandbox's CA where its TLS clients look (egress-l7.ts), once per start: written by
   * the sandbox's own root from inside its namespaces, never through its paths from the host. */
  async #installCa(id: string, nsPid: number): Promise<void> {
    const key = `${id}:${nsPid}`;
    if (this.#caInstalled.has(key)) return;
    const ca = await this.#egress.l7.ca(id);
    const root = USERS.find((u) => u.name === "root")!;
    const r = await this.exec(id, { cmd: "/bin/sh", args: ["-c", caInstallScript], cwd: "/", env: {}, user: root }, { stdin: ca.certPem, timeoutMs: 30_000 });
    if (r.exitCode !== 0) throw new Error(`installing the sandbox's CA failed (exit ${r.exitCode}): ${r.stderr.slice(0, 200)}`);
    this.#caInstalled.add(key);
  }

  setSandboxSecrets(id: string, values: Record<string, string>): void {
    this.#egress.l7.setSecrets(id, values);
  }

  setProfileSecrets(byTeam: Record<string, Record<string, string>>): void {
    this.#egress.l7.setTeamSecrets(byTeam);
  }

  /** Starts the sandbox's holder. `fresh`: its record was made in this pass, with its uid range
   * and its holder's plan (#holderPlan) leased and written already. */
  async #start(rec: SandboxRecord, fresh = false): Promise<SandboxRecord> {
    const layout = this.#layout(rec.id, rec);
    // A record made in this pass had its disk mounted then (#converge): a look fewer per create.
    if (!fresh) await this.#mountDisk(rec);
    const ns = this.capabilities.level !== "process";
    if (ns && this.#uids && (!rec.userns || rec.hostOwned)) rec = await this.#intoRange(rec, layout);
    else if (ns && rec.userns && !fresh) {
      const userns = this.#keepRange(rec);
      if (userns.base !== rec.userns.base || userns.size !== rec.userns.size) {
        rec = { ...rec, userns };
        this.#save(rec);
      }
    }
    const range = ns ? rec.userns : undefined;
    // Its range may have changed (re-leased above), and only that range may pass. A record made in
    // this pass was guarded with this range as it was made (#converge).
    if (!fresh || range !== rec.userns) guardDir(layout.dir, range);
    // The user namespace is made before the root is mounted (its ID-mapped layers need it) and
    // let go once the holder has joined it.
    const userns: { open?: OpenUserns } = {};
    // With the namespace, the tmpfs of its /dev/shm and /run (layout.ts volatileBinds), fresh.
    const volatile = { dir: layout.volatile, ...volatileBounds(rec.desired.resources.memoryMB) };
    const openNs = async (mounts: IdmapMount[], overlay?: OverlayMount) => void (userns.open = await openUserns(this.#spawner, range!, mounts, layout.log, overlay, volatile));
    try {
      if (rec.root) {
        await this.#mountRoot(rec, layout, range, range && openNs);
      } else {
        // A record made in this pass had it prepared when it was made (#converge), unless a
        // snapshot's layer was filled in after that: once is ~0.5 ms of the agent's CPU.
        if (!fresh || rec.desired.restoreFrom) prepareLayout(layout, rec.id);
        if (range) chownLayer(layout.layer, range);
      }
      if (range && !userns.open) await openNs([]);
      return await this.#startHolder(rec, layout, userns.open, fresh);
    } finally {
      await userns.open?.end();
    }
  }

  /** What a holder about to start is recorded with before it starts: its cgroups, whether it is
   * on the host's network, its address (leased here), its nonce and its seccomp filter. The
   * filter too: an agent stopped between the start and the write after it leaves this record,
   * and the next one finds the holder by its nonce (#observeRecord) and has its commands load
   * the filter the record names (view target), which must be the one its pid 1 runs under. */
  #holderPlan(rec: SandboxRecord): Pick<SandboxRecord, "cgroups" | "sharesHostNet" | "net" | "holderNonce" | "filter"> {
    const ns = this.capabilities.level !== "process";
    const hostNet = this.#wantsHostNet(rec.desired);
    const address = ns && !hostNet && this.#net && this.#mode(rec.desired) === "host" ? this.#net.keep(rec.net?.address, layoutFor(this.#dataDir, rec.id).record) : undefined;
    return {
      cgroups: this.#cgroups ? cgroupSetFor(this.#cgroups, rec.id) : undefined,
      sharesHostNet: ns ? hostNet : undefined,
      net: address ? { address } : rec.net && { address: rec.net.address },
      holderNonce: randomBytes(16).toString("hex"),
      filter: this.#seccomp && ns ? filterFor(rec.desired) : undefined,
    };
  }

  async #startHolder(rec: SandboxRecord, layout: SandboxLayout, userns: OpenUserns | undefined, fresh: boolean): Promise<SandboxRecord> {
    // One write before the holder starts: its cgroups and its address are recorded before either
    // is used, so a restart finds the holder and keeps the lease. A fresh record says so already.
    const written = fresh && rec.phase === "Pending" && !rec.holder && !rec.nsInit;
    let next: SandboxRecord = { ...rec, phase: "Pending", holder: undefined, nsInit: undefined, ...(written ? {} : this.#holderPlan(rec)) };
    if (!written) this.#save(next);
    const { cgroups } = next;
    if (this.#cgroups && cgroups) {
      const r = rec.desired.resources;
      createCgroups(this.#cgroups, cgroups, { cpuCount: r.cpuCount, memoryMB: r.memoryMB, pidsMax: r.pidsMax ?? this.#pidsMax });
    }
    const ns = this.capabilities.level !== "process";
    const hostNet = next.sharesHostNet === true;
    // Fixed for the holder's life, and recorded with the plan: its commands load the same one.
    const filter = filterFor(rec.desired);
    // A sandbox with internet access gets its veth while bwrap is still mounting its root.
    const address = ns && !hostNet && this.#net && this.#mode(rec.desired) === "host" ? next.net?.address : undefined;
    let veth: string | undefined;
    const attach = address ? async (nsInit: ProcRef) => void this.#tabled.add((veth = await this.#net!.attach(nsInit, address, this.#relay))) : undefined;
    const bwrapArgs = ns
      ? ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", hostNet ? "--share-net" : "--unshare-net",
         "--hostname", rec.id, "--cap-drop", "ALL", "--chdir", "/", ...(rec.root ? bwrapRootArgs(layout.merged, userns && layout.volatile) : bwrapMountArgs(layout, userns && layout.volatile))]
      : undefined;
    // Its exit (heard by the spawner, its parent) tells of its pid 1's end; one heard before the
    // pid 1 is watched below is kept for then.
    let watching: ProcRef | undefined;
    let ended = false;
    const onEnd = () => {
      ended = true;
      if (watching) this.#holderEnded(rec.id, watching);
    };
    const started = await startHolder(
      { id: rec.id, nonce: next.holderNonce, bwrapArgs, cgroupProcs: cgroups ? procsFiles(cgroups) : [], cwd: layout.dir, log: layout.log, onNamespaces: attach, userns, seccomp: this.#seccomp?.[filter], init: this.#init, onEnd },
      this.#spawner,
    ).catch(async (err: unknown) => {
      // A start given up on (its holder SIGKILLed) leaves nothing of it: processes still dying
      // in the sandbox's cgroup would otherwise be adopted by the retry's observation as its
      // holder, which then vanishes ("the sandbox's holder process is gone").
      await this.#endProcesses(next).catch(() => {});
      throw err;
    });
    // A root of its own with its own user namespace: setuid programs (sudo) work there.
    if (userns && rec.root) await userns.allowSetuid(started.nsInit);
    const lacked = this.#outdatedClaimed.get(rec.id);
    if (lacked) {
      this.#outdatedClaimed.delete(rec.id);
      this.#restarted.set(rec.id, lacked);
    }
    this.#holderChecked.add(rec.id);
    next = { ...next, phase: "Running", holder: started.holder, nsInit: started.nsInit, net: next.net && { address: next.net.address, veth } };
    this.#save(next);
    this.#watch(rec.id, started.nsInit, false);
    watching = started.nsInit;
    // Not watchable (its pid 1 gone since the start, its holder's exit maybe not heard yet: that
    // exit, when heard, finds nothing watched): it is what a pid 1 ended since its last look
    // would be. Watched and its exit heard already: that exit is handled now.
    if (!this.#watched.has(rec.id)) this.#pid1Ended(rec.id, started.nsInit);
    else if (ended) this.#holderEnded(rec.id, started.nsInit);
    this.#restarts.set(rec.id, holderStarted(this.#restarts.get(rec.id), Date.now()));
    return next;
  }

  /** A record an agent without user namespaces made (an older one, or one started with them off)
   * ran its holder as the host's root, and its files carry host ids. Before its holder starts
   * again it gets a range of its own, and its writable layer's owners move into it, as a
   * snapshot's do (shift-owners.ts). The record names the range (the lease's) and `hostOwned`
   * first, so an agent stopped midway finishes the move, not starts another. */
  async #intoRange(rec: SandboxRecord, layout: SandboxLayout): Promise<SandboxRecord> {
    rec = { ...rec, userns: this.#keepRange(rec), hostOwned: true };
    this.#save(rec);
    const userns = rec.userns!;
    if (existsSync(layout.layer)) await shiftOwners(layout.layer, IDENTITY, userns, true);
    const { hostOwned: _, ...moved } = rec;
    this.#save(moved);
    return moved;
  }

  /** The range of a sandbox with a user namespace whose holder is about to start, leased again
   * (leases vanish with a reboot). */
  #keepRange(rec: SandboxRecord): IdRange {
    if (!this.#uids) throw new Error(`sandbox ${rec.id} has a user namespace, which this driver cannot make: ${this.capabilities.notes.find((n) => n.startsWith("no user namespace"))}`);
    return this.#uids.keep(rec.userns, layoutFor(this.#dataDir, rec.id).record);
  }

  /** Ends every process of the sandbox and removes its cgroups; the layer stays. Without cgroups
   * the scan is the record's level's (a holder outlives an agent restarted at another level);
   * with no level (no record), the pid-namespace scan, which at `process` level finds the same
   * (every process of such a sandbox is in the agent's namespace, with its marker). */
  async #endProcesses(rec: Pick<SandboxRecord, "id" | "cgroups" | "nsInit"> & { level?: SandboxRecord["level"] }): Promise<void> {
    // Ended on purpose: not a death to report (its holder's exit, heard after this, is stale).
    this.#unwatch(rec.id);
    // An open listener would keep the sandbox's network namespace alive.
    await this.#relay.closeEgress(rec.id);
    const cgroups = rec.cgroups ?? (this.#cgroups ? cgroupSetFor(this.#cgroups, rec.id) : undefined);
    if (cgroups) await killAndRemove(cgroups);
    if (rec.nsInit && alive(rec.nsInit)) process.kill(rec.nsInit.pid, "SIGKILL");
    // Every process of a sandbox with cgroups joined them before exec, so cgroup.kill reached all
    // of them; the host-wide process scan (O(processes on the host)) is for sandboxes without.
    if (!cgroups) await signalSandbox(rec.id, rec.nsInit, "SIGKILL", rec.level === "process");
  }

  async #freeze(rec: SandboxRecord): Promise<void> {
    this.#timeFrozen(rec.id, true);
    if (rec.cgroups) return setFrozen(rec.cgroups, true);
    await signalSandbox(rec.id, rec.nsInit, "SIGSTOP", rec.level === "process");
    this.#save({ ...rec, phase: "Frozen" });
  }

  async #thaw(rec: SandboxRecord): Promise<void> {
    if (rec.cgroups) await setFrozen(rec.cgroups, false);
    else {
      await signalSandbox(rec.id, rec.nsInit, "SIGCONT", rec.level === "process");
      this.#save({ ...rec, phase: "Running" });
    }
    this.#timeFrozen(rec.id, false);
  }

  /** A watched pid 1 that no exit event can tell of while its sandbox is frozen (#timedFrozen)
   * is timed from its freeze to its thaw (a pid 1 killed from the host or by the OOM killer
   * meanwhile is noticed within a look, not at the thaw). */
  #timeFrozen(id: string, frozen: boolean): void {
    if (!frozen) {
      if (this.#timedFrozen.delete(id)) this.#time(id, false);
    } else if (this.#watched.has(id) && !this.#timed.has(id)) {
      this.#timedFrozen.add(id);
      this.#time(id, true);
    }
  }

  /** Reads the world for one record; adopts a holder the record lost (agent killed mid-create).
   * `fresh`: the record was made in this pass, so no holder of it can run yet. `locked`: under the
   * sandbox's lock, so a running pid 1 found is watched (#watch: timed, as no exit event of this
   * driver's covers a holder it finds rather than starts); unlocked observations
   * (observe, list) may race a stop and never arm it: every caller says which it is. `frozenKnown`:
   * whether its cgroup is frozen, where the caller knows (a pass under its lock); else read. */
  #observeRecord(rec: SandboxRecord, fresh: boolean, locked: boolean, frozenKnown?: boolean): SandboxObservation {
    const base = {
      id: rec.id,
      generation: rec.generation,
      level: rec.level,
      createdAt: rec.createdAt,
      enforced: this.#enforced(rec),
      address: rec.net?.address,
      ...this.#holderConditions(rec.id),
    };
    if (rec.phase === "Stopped") return { ...base, phase: "Stopped", pauseStrategy: "Stop" };
    if (!this.#alive(rec.id, rec.nsInit)) {
      // With cgroups, a holder that was started joined the sandbox's cgroup before exec, so its
      // process list is the whole search (a record may predate writing `cgroups` down).
      const set = rec.cgroups ?? (this.#cgroups ? cgroupSetFor(this.#cgroups, rec.id) : undefined);
      const found = fresh ? undefined : discoverHolder(rec.id, rec.holderNonce, set ? cgroupPids(set.core) : undefined);
      if (!found) {
        const message = rec.nsInit ? "the sandbox's holder process is gone" : "creation was interrupted before the holder started";
        return { ...base, phase: rec.phase === "Pending" ? "Pending" : "Failed", message };
      }
      rec = { ...rec, ...found, phase: rec.phase === "Frozen" ? "Frozen" : "Running" };
      this.#save(rec);
    }
    if (locked && rec.nsInit) this.#watch(rec.id, rec.nsInit);
    const frozen = rec.cgroups ? (frozenKnown ?? isFrozen(rec.cgroups)) : rec.phase === "Frozen";
    const incarnation = rec.nsInit && `${rec.nsInit.pid}:${rec.nsInit.start}`;
    return frozen ? { ...base, incarnation, phase: "Paused", pauseStrategy: "Freeze" } : { ...base, incarnation, phase: "Running" };
  }

  /** `SeccompFiltered`/`UserNamespaced` for a sandbox adopted with a holder lacking them (False)
   * and, once this driver restarted that holder, True; nothing for any other sandbox. */
  #holderConditions(id: string): Pick<SandboxObservation, "conditions"> {
    return holderConditions(this.#outdatedClaimed.get(id), this.#restarted.get(id));
  }

  #enforced(rec: SandboxRecord): SandboxObservation["enforced"] {
    const limits = rec.cgroups ? this.capabilities.limits : { cpu: false, memory: false, pids: false };
    return { ...limits, network: rec.level !== "process" || this.#mode(rec.desired) === "host", disk: rec.disk !== undefined };
  }

  /** Watches `ref`, the running pid 1 of sandbox `id`: one descriptor of its /proc/<pid>/stat,
   * kept while it is the sandbox's pid 1. `timed`: no exit event covers its holder (one this
   * driver did not start), so the timer looks at it (#checkWatched). */
  #watch(id: string, ref: ProcRef, timed = true): void {
    // A pass or a check that waited on a sandbox's lock may end after closeHelpers: a descriptor
    // opened then would stay open with nothing left to close it.
    if (this.#closed) return;
    const now = this.#watched.get(id);
    if (now && sameProc(now.ref, ref)) return;
    now?.close();
    this.#timedFrozen.delete(id);
    const handle = StatHandle.open(ref);
    if (handle) this.#watched.set(id, handle);
    else this.#watched.delete(id);
    this.#time(id, handle !== undefined && timed);
  }

  #unwatch(id: string): void {
    this.#watched.get(id)?.close();
    this.#watched.delete(id);
    this.#timedFrozen.delete(id);
    if (this.#timed.has(id)) this.#time(id, false);
  }

  /** 0 when a sandbox whose pid 1 ended may start again now (logged, with its count); else how
   * long it waits first (ms, restart-backoff.ts). */
  #restartWait(id: string): number {
    const { wait, next } = restartWait(this.#restarts.get(id), Date.now());
    const waitingAlready = this.#restarts.get(id)?.notBefore !== undefined;
    this.#restarts.set(id, next);
    if (wait === 0) {
      console.warn(`local driver: sandbox ${id}: its init process (pid 1) ended; starting it again (restart ${next.count}: files kept, processes gone)`);
      return 0;
    }
    // The same words for the whole wait: an observation that changed each second would be sent
    // to the edge each second.
    if (!waitingAlready) console.warn(`local driver: sandbox ${id}: its init process (pid 1) ended soon after its last start; starting it again in ${Math.ceil(wait / 1000)} s`);
    return wait;
  }

  async observe(id: string): Promise<SandboxObservation | undefined> {
    const rec = this.#record(id);
    if (!rec) return undefined;
    const obs = this.#observeRecord(rec, false, false);
    // A pid 1 that ended is started again by the sandbox's next `ensure` (a reboot), so it is not
    // Failed: the edge keeps a sandbox it once heard of as Failed so for good (an agent's
    // inventory after a reconnect asks here).
    return obs.phase === "Failed" && rec.nsInit ? restarting(obs, RESTARTING) : obs;
  }

  /** A template build step's network, like a sandbox's (builder/step-net.ts); undefined where
   * sandboxes have none (then a step has loopback only). */
  stepNetwork(stagingDir: string): Promise<StepNet> | undefined {
    return this.#net && openStepNet(this.#net, this.#relay, stagingDir);
  }

  /** The uid ranges a template build step's user namespace is given (the sandboxes' own allocator:
   * a step never shares a range with a sandbox), or why steps run as the host's root. */
  stepUids(): UidRanges | string {
    return this.#uids ?? this.#usernsError!;
  }

  /** Template layers this driver's sandboxes and snapshots mount (a layer in it must stay). */
  async layersInUse(): Promise<Set<string>> {
    const used = new Set<string>();
    for (const id of recordedIds(this.#dataDir)) for (const l of this.#record(id)?.root?.layers ?? []) used.add(l);
    for (const id of this.#snapshots.ids()) for (const l of this.#snapshots.meta(id)?.root?.layers ?? []) used.add(l);
    return used;
  }

  async list(): Promise<SandboxObservation[]> {
    const out: SandboxObservation[] = [];
    const ids = new Set(recordedIds(this.#dataDir));
    for (const id of ids) {
      const obs = await this.observe(id);
      out.push(obs ?? { id, generation: 0, phase: "Failed", level: this.capabilities.level, createdAt: "", enforced: { cpu: false, memory: false, pids: false, network: false }, message: "directory without a record" });
    }
    for (const id of this.#cgroups ? listCgroupIds(this.#cgroups) : []) {
      if (ids.has(id)) continue;
      out.push({ id, generation: 0, phase: "Failed", level: this.capabilities.level, createdAt: "", enforced: { cpu: false, memory: false, pids: false, network: false }, message: "cgroup without a record" });
    }
    return out;
  }

  #running(id: string): SandboxRecord {
    const rec = this.#record(id);
    if (!rec) throw new SandboxNotFoundError(id);
    if (rec.phase === "Stopped" || !this.#alive(id, rec.nsInit)) throw new SandboxNotFoundError(id, "not running");
    return rec;
  }

  view(id: string): SandboxView {
    const rec = this.#running(id);
    return new LocalSandboxView({
      id,
      mounts: mountsFor(this.#layout(id, rec)),
      namespaces: rec.level !== "process",
      launcher: this.#spawner,
      ids: () => this.#record(id)?.userns ?? IDENTITY,
      target: () => {
        const now = this.#record(id);
        // Alive with its recorded start, asked on every call: the watch hears of an ended pid 1
        // only after it ended (its holder's exit, or a timer's look), its pid may be reused meanwhile, and a view
        // outlives the check at its creation. enter.pl checks the start again (the pid may be reused after this).
        if (!now || now.phase === "Stopped" || !now.nsInit || !this.#alive(id, now.nsInit)) return undefined;
        const proxied = now.level !== "process" && this.#mode(now.desired) === "proxy";
        // Under L7 policy every connection is redirected and inspected; the proxy itself refuses
        // such a sandbox (its tunnels would not be inspected), so no proxy variables.
        const env = proxied ? (this.#egress.l7.wants(now.desired) ? caEnv() : proxyEnv(this.#egressPort)) : undefined;
        // No CAP_NET_RAW where an eth0 may be behind the proxy (a sandbox's processes keep the
        // bounding set they started with when it moves behind it, so every sandbox of a driver
        // with the fast path); without the fast path a governed sandbox has only lo, where raw
        // sockets (ping, tcpdump) reach nothing else, and keeps it.
        const caps = this.#fastPath ? GOVERNED_CAPS : SANDBOX_CAPS;
        const seccomp = now.level === "process" ? undefined : this.#seccomp?.[now.filter ?? "default"];
        return { nsInit: now.level === "process" ? undefined : now.nsInit, cgroupProcs: now.cgroups ? procsFiles(now.cgroups) : [], env, caps, seccomp };
      },
    });
  }

  /** A sandbox sharing the host's network listens on the host's loopback. One with internet
   * access in a namespace of its own is dialled at its address; a port nobody listens on there
   * is tried on its loopback through the port relay, so servers bound to 127.0.0.1 answer too
   * (E2B forwards those as well). One without network or with egress rules is reached through
   * the port relay only (see port-relay.ts). */
  async connectUserPort(id: string, port: number): Promise<Socket> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`invalid port ${port}`);
    const rec = this.#record(id);
    if (!rec || rec.phase === "Stopped" || !rec.nsInit || !this.#alive(id, rec.nsInit)) throw new SandboxNotFoundError(id, "not running");
    if (this.#sharesHostNet(rec) || rec.level === "process") return dialTcp("127.0.0.1", port);
    const mode = this.#mode(rec.desired);
    // From outside, the proxy would serve anyone under the sandbox's rules.
    if (mode === "proxy" && port === this.#egressPort) throw new Error(`port ${port} is the sandbox's egress proxy, not a user port`);
    if (mode === "host" && rec.net?.veth) {
      try {
        return await dialTcp(rec.net.address, port);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ECONNREFUSED") throw err;
      }
    }
    return this.#relay.connect(rec.nsInit, port);
  }

  async exec(id: string, req: SpawnRequest, opts: { timeoutMs?: number; stdin?: string } = {}): Promise<ExecResult> {
    const cmd = this.view(id).command(req);
    const child = await this.#spawner.spawn(cmd, { detached: false, stdio: ["pipe", "pipe", "pipe"] });
    const [stdin, out, err] = [0, 1, 2].map((n) => child.pipes.get(n)!);
    const text = (s: NodeJS.ReadableStream) =>
      new Promise<string>((resolve) => {
        let t = "";
        s.on("data", (c) => (t += String(c)));
        s.on("error", () => {});
        s.once("close", () => resolve(t));
      });
    const [stdout, stderr] = [text(out!), text(err!)];
    const timer = opts.timeoutMs ? setTimeout(() => process.kill(child.pid, "SIGKILL"), opts.timeoutMs) : undefined;
    // A command that exits without reading its input closes the pipe first; that is fine.
    stdin!.on("error", () => {});
    stdin!.resume();
    stdin!.end(opts.stdin ?? "");
    const exit = await new Promise<LaunchedExit>((resolve) => child.onExit(resolve));
    clearTimeout(timer);
    if (exit.error) throw new Error(exit.error);
    return { exitCode: exit.code, signal: exit.signal as NodeJS.Signals | null, stdout: await stdout, stderr: await stderr };
  }

  freeze(id: string): Promise<void> {
    return this.#locked(id, async () => this.#freeze(this.#running(id)));
  }

  thaw(id: string): Promise<void> {
    return this.#locked(id, async () => this.#thaw(this.#running(id)));
  }

  /** Copies the sandbox's disk (or, without one, its layer) to snapshot `snapshotId` (new id when
   * absent), a running sandbox frozen for the copy and then put back as it was (snapshots.ts). */
  snapshotFs(id: string, snapshotId?: string): Promise<SnapshotRef> {
    return this.#locked(id, async () => {
      const rec = this.#record(id);
      if (!rec) throw new SandboxNotFoundError(id);
      const layout = this.#layout(id, rec);
      // An atomic freeze gives a consistent copy; signal-based freezing is not worth the risk.
      const freeze = rec.cgroups && rec.phase !== "Stopped" && this.#alive(id, rec.nsInit) && !isFrozen(rec.cgroups);
      if (freeze) await setFrozen(rec.cgroups!, true);
      try {
        const snapId = snapshotId ?? `${id}-${Date.now().toString(36)}-${randomBytes(3).toString("hex")}`.toLowerCase();
        const source = rec.disk ? { kind: "disk" as const, image: layout.image, mountedAt: layout.disk, sizeMB: rec.disk.sizeMB } : { kind: "layer" as const, layer: layout.layer };
        const meta = await this.#snapshots.take(snapId, id, source, rec.root, rec.userns);
        return { id: meta.id, sandboxId: id, location: this.#snapshots.path(meta.id), bytes: meta.bytes, createdAt: meta.createdAt };
      } finally {
        if (freeze) await setFrozen(rec.cgroups!, false);
      }
    });
  }

  /** Runs `fn` on the sandbox's files: a stopped sandbox's disk is mounted for it, and unmounted
   * again after. */
  async #withDisk<T>(rec: SandboxRecord, fn: () => Promise<T>): Promise<T> {
    await this.#mountDisk(rec);
    try {
      return await fn();
    } finally {
      if (rec.disk && rec.phase === "Stopped") await unmountDisk(this.#spawner, this.#layout(rec.id, rec).disk);
    }
  }

  restoreFs(id: string, snapshot: Pick<SnapshotRef, "id">): Promise<void> {
    return this.#locked(id, async () => {
      const rec = this.#record(id);
      if (!rec) throw new SandboxNotFoundError(id);
      const stopped = await this.#fillFrom(rec, snapshot);
      if (stopped !== rec) await this.#syncNetwork(await this.#start(stopped));
    });
  }

  /** Replaces the sandbox's layer with the snapshot's. A sandbox with processes is stopped first
   * and returned Stopped (the caller starts it again): no process of the sandbox may run while its
   * files are replaced and their owners shifted (one could swap a directory for a link between
   * the walk's lstat and readdir, and an overlay's upper must not change under its mount), as a
   * VM restored from a disk snapshot reboots. Otherwise `rec` itself is returned. */
  async #fillFrom(rec: SandboxRecord, snapshot: Pick<SnapshotRef, "id">): Promise<SandboxRecord> {
    const snap = this.#snapshots.need(snapshot.id);
    // A rooted snapshot's top directories are the tenant's (`tmp -> /etc` is theirs to make); put
    // into a host-view sandbox, whose start chmods and binds those paths as the host's root, they
    // would reach the host. Today a sandbox only restores its own checkpoint, so they always match.
    if (Boolean(snap.root) !== Boolean(rec.root)) throw new TerminalError("SnapshotMismatch", `snapshot ${snap.id} and sandbox ${rec.id} differ in having a root filesystem of their own: not restored`);
    const layout = this.#layout(rec.id, rec);
    const fill = async () => {
      await this.#snapshots.fillLayer(snap, layout.layer);
      await shiftOwners(layout.layer, snap.userns ?? IDENTITY, rec.userns ?? IDENTITY);
    };
    if (rec.phase !== "Stopped" && this.#alive(rec.id, rec.nsInit)) {
      await this.#endProcesses(rec);
      const stopped: SandboxRecord = { ...rec, phase: "Stopped", holder: undefined, nsInit: undefined };
      this.#save(stopped);
      if (rec.root) await unmountRoot(this.#spawner, layout.merged);
      // Stopped, as a Stop pause leaves it: the old /dev/shm and /run go too, not kept in memory
      // until the start after (which would detach them) or kept for good if that start fails.
      await unmountDisk(this.#spawner, layout.volatile);
      await fill();
      return stopped;
    }
    await this.#withDisk(rec, fill);
    return rec;
  }

  /** Trash deletions under way (#emptyTrash, #unlinkInTrash); `dispose` waits for them. */
  readonly #trashRemovals = new Set<Promise<void>>();
  /** The tail of the images' unlinks (#unlinkInTrash), which run one after another. */
  #unlinks: Promise<void> = Promise.resolve();

  /** Removing a sandbox's files took ~10 ms of the event loop per destroy (hundreds of unlinks);
   * one rename takes them out of sight at once, and the deletion runs in a process of its own
   * (without a disk, the sandbox's writable layer is there: a tree the tenant shaped,
   * remove-tree.ts). What cannot go stays in the trash for the next start. */
  async #removeDir(dir: string): Promise<void> {
    const trash = join(this.#dataDir, "trash", `${basename(dir)}.${randomBytes(4).toString("hex")}`);
    try {
      renameSync(dir, trash);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
      // Still where a new sandbox of the same id would be made: gone before destroy returns.
      return removeTree([dir], this.#spawner);
    }
    this.#emptyTrash([trash]);
  }

  /** Deletes what is in the trash in the background (it runs through the spawner, which goes with
   * the driver). */
  #emptyTrash(paths: string[]): void {
    this.#inTrash(removeTree(paths, this.#spawner), paths.map((p) => basename(p)).join(" "));
  }

  /** A file in the trash (a destroyed sandbox's image): one unlink on the thread pool, in the
   * background, one at a time (as the intent store's fsyncs): the last unlink of a fragmented image
   * frees its extents inside the syscall and has held a pool thread for seconds (4-14 s for 1 GiB),
   * and the pool (4 threads) is shared with every tenant's files API. Missing is fine (the helper's
   * rename failed: rm took it). */
  #unlinkInTrash(file: string): void {
    const done = this.#unlinks.then(() =>
      unlink(file).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== "ENOENT") throw err;
      }),
    );
    this.#unlinks = done.catch(() => {});
    this.#inTrash(done, basename(file));
  }

  /** One trash deletion under way until it settles; a failure is a warning (what stays is
   * emptied at the next start). */
  #inTrash(work: Promise<void>, what: string): void {
    const removal = work.catch((err: Error) => console.warn(`trash ${what}: ${err.message}`)).finally(() => this.#trashRemovals.delete(removal));
    this.#trashRemovals.add(removal);
  }

  async deleteSnapshot(snapshot: Pick<SnapshotRef, "id">): Promise<void> {
    await this.#snapshots.delete(snapshot.id);
  }

  /** Ends every process of the sandbox at once (cgroup.kill) and leaves its files and mounts, so
   * a stop that must be quick can make sure nothing runs before the slower cleanup. */
  endProcesses(id: string): Promise<void> {
    return this.#locked(id, async () => this.#endProcesses(this.#record(id) ?? { id }));
  }

  destroy(id: string): Promise<void> {
    return this.#locked(id, async () => {
      const layout = layoutFor(this.#dataDir, id);
      const rec = this.#record(id);
      await this.#endProcesses(rec ?? { id });
      // The pair goes with the namespace; its tables on the host (port-relay.pl `veth_tables`)
      // go with an `unveth`, which finds the pair gone or deletes it.
      if (rec?.net?.veth && this.#net) await this.#net.detach(rec.net.veth, this.#relay).catch(() => {});
      if (rec?.net?.veth) this.#tabled.delete(rec.net.veth);
      this.#egress.forget(id);
      // Before the directory moves: the trash is deleted file by file, never through a mount. With
      // a disk, the unmount and the deletion are one helper process (root-overlay.ts), and the
      // image (tenant-sized) goes to the trash for a background unlink.
      const aside = join(this.#dataDir, "trash", `${id}.${randomBytes(4).toString("hex")}.img`);
      const { removed, moved } = await unmountAndRemoveSandbox(this.#spawner, layout.merged, layout.disk, layout.dir, { from: layout.image, to: aside });
      if (moved) this.#unlinkInTrash(aside);
      // After the unmount (a range's uids must not reach the last sandbox's mounts); a lease whose
      // record went with `removed` is still released (leases compare the record's path).
      this.#net?.release(rec?.net?.address, layout.record);
      this.#uids?.release(rec?.userns, layout.record);
      if (!removed) await this.#removeDir(layout.dir);
      forgetRecord(layout.record);
      this.#records.delete(id);
      this.#holderChecked.delete(id);
      this.#outdatedClaimed.delete(id);
      this.#restarted.delete(id);
      this.#restarts.delete(id);
    });
  }
}

/** Whether a sandbox wanting `d` has processes: running, or paused by a freeze. */
function wantsProcesses(d: DesiredSandbox): boolean {
  return d.state === "Running" || d.pauseStrategy === "Freeze";
}

function dialTcp(host: string, port: number): Promise<Socket> {
  return new Promise<Socket>((resolve, reject) => {
    const s = tcpConnect(port, host);
    s.once("connect", () => resolve(s.off("error", reject))).once("error", reject);
  });
}

/** Whether `file` is a regular file of root's, of the init's mode, holding `image` (root reads it
 * despite the mode): anything else there is replaced. */
function sameInit(file: string, image: Uint8Array): boolean {
  try {
    const st = lstatSync(file);
    return st.isFile() && st.uid === 0 && (st.mode & 0o7777) === SANDBOX_INIT_MODE && readFileSync(file).equals(image);
  } catch {
    return false;
  }
}
