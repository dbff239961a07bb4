// What the SandboxGroupDO shell performs after a transition. The alarm is not an effect: the shell
// sets its one alarm to `dueAt(state)` after every transition.
import type { Intent } from "../../schema/protocol/index.ts";

export type SandboxEffect =
  /** Send this intent to the sandbox's ClusterDO (durable outbox, at-least-once). */
  | { kind: "intent"; intent: Intent }
  /** Write the index row (schema/db sandboxes) from the new state. */
  | { kind: "index" }
  /** The sandbox is gone: drop its row (and its index row). */
  | { kind: "purge" };
