// The identity view: the sandbox is the host itself (a Kubernetes pod sidecar, or the runtime
// started standalone). Paths map one to one; processes switch to the requested user via uid/gid
// when the runtime runs as root.
import { readFileSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { parseGroup, parsePasswd, type PasswdEntry } from "./passwd.ts";
import type { HostCommand, SandboxUser, SandboxView, SpawnRequest } from "./sandbox-view.ts";

/** Re-reads a file only when its mtime changes, so `useradd` during a run is picked up. */
function cachedFile<T>(path: string, parse: (text: string) => T, empty: T): () => T {
  let mtime = -1;
  let value = empty;
  return () => {
    try {
      const m = statSync(path).mtimeMs;
      if (m !== mtime) {
        value = parse(readFileSync(path, "utf8"));
        mtime = m;
      }
    } catch {
      value = empty;
    }
    return value;
  };
}

export class UserSwitchError extends Error {
  constructor(user: string) {
    super(`cannot run as '${user}': the runtime is not root`);
    this.name = "UserSwitchError";
  }
}

export class HostView implements SandboxView {
  #passwd: () => PasswdEntry[];
  #groups: () => Map<number, string>;
  #asRoot = process.getuid?.() === 0;

  constructor(opts: { passwdPath?: string; groupPath?: string } = {}) {
    this.#passwd = cachedFile(opts.passwdPath ?? "/etc/passwd", parsePasswd, []);
    this.#groups = cachedFile(opts.groupPath ?? "/etc/group", parseGroup, new Map());
  }

  toHost(sandboxPath: string): string {
    return resolve(sandboxPath);
  }

  toSandbox(hostPath: string): string {
    return hostPath;
  }

  lookupUser(name: string): SandboxUser | undefined {
    return this.#passwd().find((u) => u.name === name);
  }

  userName(uid: number): string | undefined {
    return this.#passwd().find((u) => u.uid === uid)?.name;
  }

  groupName(gid: number): string | undefined {
    return this.#groups().get(gid);
  }

  command(req: SpawnRequest): HostCommand {
    const cmd: HostCommand = { file: req.cmd, args: req.args, cwd: req.cwd, env: req.env };
    if (this.#asRoot) {
      cmd.uid = req.user.uid;
      cmd.gid = req.user.gid;
    } else if (req.user.uid !== process.getuid?.()) {
      // Not root: the runtime cannot switch user, and running as itself would lie about it.
      throw new UserSwitchError(req.user.name);
    }
    return cmd;
  }
}
