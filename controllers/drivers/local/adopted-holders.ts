// Holders an older agent started (README.md "Holders an older agent started"): what such a holder
// may lack that this driver gives every holder it starts, how the agent's log says so, and the
// condition a claimed sandbox reports until its holder restarts. Pure: the driver decides which
// holders lack what (it reads the kernel's status and the sandbox's record) and when they restart.
import type { SandboxObservation } from "../driver.ts";
import { SandboxConditionType, SeccompFilteredReason, UserNamespacedReason } from "../../../schema/crd/conditions.ts";

/** `seccomp`: its holder (pid 1) runs without the driver's filter (`Seccomp: 0`), and a filtered
 * command may ptrace it and make the calls the filter refuses. `userns`: it runs in the host's
 * user namespace (its record has no range): root inside is the host's root, without capabilities
 * but owning every file the host's root owns. `init`: its pid 1 is bwrap's own over `sleep`, not
 * the driver's init (sandbox-init.ts): root inside can end it (`pkill sleep`, `kill -9 -1`,
 * ptrace), and its `sleep` holds the descriptor of the sandbox's user namespace. */
export type HolderLack = "seccomp" | "userns" | "init";

type Condition = NonNullable<SandboxObservation["conditions"]>[number];

// `init` has no condition (yet): the log line says it; a condition type would be a schema change.
const LACKS: Record<HolderLack, { logged: string; lacking?: Condition; restarted?: Condition }> = {
  seccomp: {
    logged: "runs without the seccomp filter",
    lacking: {
      type: SandboxConditionType.SeccompFiltered,
      status: "False",
      reason: SeccompFilteredReason.UnfilteredHolder,
      message: "its holder (pid 1) was started by an older agent without the seccomp filter, and a process of the sandbox may ptrace it and make the calls the filter refuses; a Stop pause or an update ops recreate restarts it filtered",
    },
    restarted: { type: SandboxConditionType.SeccompFiltered, status: "True", reason: SeccompFilteredReason.HolderRestarted, message: "its holder was restarted under the seccomp filter" },
  },
  userns: {
    logged: "runs in the host's user namespace (root inside is the host's root)",
    lacking: {
      type: SandboxConditionType.UserNamespaced,
      status: "False",
      reason: UserNamespacedReason.HostRootHolder,
      message: "its holder (pid 1) was started by an agent without user namespaces: root inside is the host's root (without capabilities); a Stop pause or an update ops recreate restarts it in a user namespace of its own, its files moved into its range",
    },
    restarted: { type: SandboxConditionType.UserNamespaced, status: "True", reason: UserNamespacedReason.HolderRestarted, message: "its holder was restarted in a user namespace of its own" },
  },
  init: { logged: "is bwrap's own over `sleep`, not the init (root inside can end it)" },
};

/** The agent's log line for an adopted holder lacking `lacks`: an unclaimed warm member is
 * restarted at once, a claimed one is counted (`claimedCount` such sandboxes on the driver). */
export function adoptionWarning(id: string, lacks: readonly HolderLack[], replaced: boolean, claimedCount: number): string {
  const what = lacks.map((l) => LACKS[l].logged).join(" and ");
  const done = replaced ? "an unclaimed warm member, restarted with it" : `claimed, left running until its holder restarts (a Stop pause); ${claimedCount} such sandbox(es) on this driver`;
  return `local driver: sandbox ${id}: its holder (pid 1) ${what} (started by an older agent): ${done}`;
}

/** The conditions of a sandbox whose adopted holder lacks `lacking` (False each), or whose holder
 * this driver restarted after it lacked `restarted` (True each). */
export function holderConditions(lacking: readonly HolderLack[] | undefined, restarted: readonly HolderLack[] | undefined): Pick<SandboxObservation, "conditions"> {
  const conditions = [...(lacking ?? []).map((l) => LACKS[l].lacking), ...(restarted ?? []).map((l) => LACKS[l].restarted)].filter((c) => c !== undefined);
  return conditions.length ? { conditions } : {};
}
