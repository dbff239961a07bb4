// Messages between the agent and its spawner process (Node IPC, structured clone), and the one
// socket trick both sides need.
import { openSync } from "node:fs";
import type { Socket } from "node:net";
import type { HostCommand } from "../../runtime/sandbox-view.ts";

/** What to start: the runtime's host command (pipes or PTY), as the spawner receives it. */
export type SpawnCommand = HostCommand;

/** One entry per child fd: "pipe" comes back to the agent as a socket, `append` opens a file for
 * appending, `read` one for reading (a regular file: blocking reads, unlike a socket Node made).
 * `same`: a second descriptor of the pipe of an earlier entry (that child fd's), so the agent's
 * socket ends only once the child has closed both; where that pipe is no pooled connection (the
 * pool was empty) the entry is "ignore", and the socket may end sooner (holder.ts waits on it
 * only as a hint). */
export type StdioSpec = "ignore" | "pipe" | { append: string } | { read: string } | { same: number };

/** The fd a file entry of StdioSpec opens (the caller closes it once the child has its copy). */
export function openStdioFile(s: { append: string } | { read: string }): number {
  return "append" in s ? openSync(s.append, "a") : openSync(s.read, "r");
}

export type SpawnerRequest =
  | ({ t: "spawn"; id: number; detached: boolean; stdio: StdioSpec[] } & SpawnCommand)
  | ({ t: "pty"; id: number; cols: number; rows: number } & SpawnCommand)
  | { t: "write"; id: number; data: Uint8Array }
  | { t: "resize"; id: number; cols: number; rows: number }
  /** Stop / restart reading the terminal: the agent's stream of it is full (backpressure). */
  | { t: "pause" | "resume"; id: number };

export type SpawnerReply =
  | { t: "ready"; pid: number }
  /** Followed by one `fd` message per listed pipe, in order. `pooled` are the pipes that use
   * connections the agent opened in advance instead: child fd -> the connection's id. */
  | { t: "spawned"; id: number; pid: number; pipes: number[]; pooled?: Record<number, number> }
  | { t: "fd"; id: number; n: number }
  | { t: "error"; id: number; message: string }
  | { t: "data"; id: number; data: Uint8Array }
  | { t: "exit"; id: number; code: number | null; signal: NodeJS.Signals | number | null };

/** A pooled connection starts with its id: 4 bytes, big-endian. */
export const CONNECTION_ID_BYTES = 4;

/** Stops Node reading a socket until a consumer reads it (net.Socket's _read starts reading again
 * when `reading` is false). Node starts reading every socket it wraps, which would take a child's
 * first output (or its end of file) before the process that should see it has the socket. */
export function stopReading(s: Socket): void {
  const h = (s as unknown as { _handle: { readStop(): number; reading: boolean } | null })._handle;
  if (!h) return;
  h.readStop();
  h.reading = false;
}
