// A build step's network: a namespace of its own attached to the sandboxes' bridge exactly as a
// sandbox's is (sandbox-net.ts: an isolated bridge port, an address leased host-wide, the same
// nftables table), so installer steps (aptInstall, pipInstall, npmInstall, gitClone, any runCmd)
// reach registries while the host, other sandboxes, link-local and private ranges stay dropped.
// The namespace is made by a small holder process (`unshare --net`) before the step starts, so the
// veth is in place before the step's first packet; bwrap then joins it (nsenter) instead of
// unsharing its own. The holder reads its stdin: it ends with the agent even after a SIGKILL.
// The namespace is held by an fd opened once, under a handle on the holder's /proc directory
// checked for its start time (proc-handle.ts), never named by the holder's pid again: had the
// holder ended and a host process got its pid, `/proc/<pid>/ns/net` would be the host's network.
import { spawn } from "node:child_process";
import { closeSync, openSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { procRef } from "../holder.ts";
import { resolvConf } from "../layout.ts";
import { openProc } from "../proc-handle.ts";
import type { PortRelay } from "../port-relay.ts";
import type { SandboxNet } from "../sandbox-net.ts";

export interface StepNet {
  /** An open fd of the namespace the step's bwrap joins (open until `close`). */
  nsFd: number;
  /** The step's /etc/resolv.conf (a sandbox's). */
  resolvConf: string;
  close(): Promise<void>;
}

const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/** lo up, and every port bindable by any uid (as Docker sets it in a container's namespace): the
 * namespace is the host's root's, so a step's root (of a user namespace of its own) holds no
 * CAP_NET_BIND_SERVICE over it, and a step may start a server on port 80 as it could before. */
const HOLDER = "ip link set lo up && echo 0 > /proc/sys/net/ipv4/ip_unprivileged_port_start || exit 1; echo up; read _";

/** Opens a step network; `dir` (the step's staging directory, not its layer tree) keeps the
 * record that names the address lease, so a lease left by a dead agent is taken over later. */
export async function openStepNet(net: SandboxNet, relay: PortRelay, dir: string): Promise<StepNet> {
  const record = join(dir, "net.json");
  const address = net.lease(record);
  writeFileSync(record, JSON.stringify({ net: { address } }), { mode: 0o600 });
  const holder = spawn("unshare", ["--net", "--", "/bin/sh", "-c", HOLDER], { stdio: ["pipe", "pipe", "pipe"], env: { PATH } });
  const exited = new Promise<void>((ok) => holder.once("close", () => ok()));
  let veth: string | undefined;
  let nsFd: number | undefined;
  const close = async () => {
    if (nsFd !== undefined) closeSync(nsFd);
    nsFd = undefined;
    holder.kill("SIGKILL");
    await exited;
    if (veth) await net.detach(veth, relay).catch(() => undefined);
    net.release(address, record);
    rmSync(record, { force: true });
  };
  try {
    await new Promise<void>((ok, fail) => {
      let err = "";
      holder.stderr!.on("data", (b: Buffer) => (err += b.toString()).slice(0, 1000));
      holder.stdout!.once("data", () => ok());
      holder.once("error", fail);
      holder.once("close", (code) => fail(new Error(`build network: the namespace holder exited ${code}: ${err.trim()}`)));
    });
    // Not reaped yet (node reaps in the loop, and sets exitCode then): its pid is its own still.
    const ref = holder.exitCode === null && holder.signalCode === null ? procRef(holder.pid!) : undefined;
    const proc = ref && openProc(ref);
    if (!ref || proc === undefined) throw new Error("build network: the namespace holder is gone");
    try {
      nsFd = openSync(`/proc/self/fd/${proc}/ns/net`, "r");
    } finally {
      closeSync(proc);
    }
    veth = await net.attach(ref, address, relay);
    return { nsFd, resolvConf: resolvConf(), close };
  } catch (err) {
    await close();
    throw err;
  }
}
