// Messages between the agent and its spawner process (Node IPC, structured clone).

export interface SpawnCommand {
  file: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
  uid?: number;
  gid?: number;
}

/** One entry per child fd: "pipe" comes back to the agent as a socket, `append` opens a file. */
export type StdioSpec = "ignore" | "pipe" | { append: string };

export type SpawnerRequest =
  | ({ t: "spawn"; id: number; detached: boolean; stdio: StdioSpec[] } & SpawnCommand)
  | ({ t: "pty"; id: number; cols: number; rows: number } & SpawnCommand)
  | { t: "write"; id: number; data: Uint8Array }
  | { t: "resize"; id: number; cols: number; rows: number };

export type SpawnerReply =
  | { t: "ready"; pid: number }
  /** Followed by one `fd` message per listed pipe, in order. */
  | { t: "spawned"; id: number; pid: number; pipes: number[] }
  | { t: "fd"; id: number; n: number }
  | { t: "error"; id: number; message: string }
  | { t: "data"; id: number; data: Uint8Array }
  | { t: "exit"; id: number; code: number | null; signal: NodeJS.Signals | number | null };
