// The identity view: the sandbox is the host itself (a Kubernetes pod sidecar, or the runtime
// started standalone). Paths map one to one; processes switch to the requested user via uid/gid
// when the runtime runs as root.
import { realpathSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { cachedFile, parseGroup, parsePasswd, type PasswdEntry } from "./passwd.ts";
import type { HostCommand, SandboxUser, SandboxView, SpawnRequest } from "./sandbox-view.ts";

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
    this.#passwd = cachedFile(() => opts.passwdPath ?? "/etc/passwd", parsePasswd, []);
    this.#groups = cachedFile(() => opts.groupPath ?? "/etc/group", parseGroup, new Map());
  }

  /** Links resolved as the kernel would (the sandbox is the host); a path that does not exist
   * (yet) stays as written. */
  toHost(sandboxPath: string, opts?: { followFinal?: boolean }): string {
    const path = resolve(sandboxPath);
    try {
      if (opts?.followFinal ?? true) return realpathSync(path);
      const dir = realpathSync(dirname(path));
      return path === "/" ? path : join(dir, basename(path));
    } catch {
      return path;
    }
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
