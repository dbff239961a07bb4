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
  #groups: () => ReadonlyMap<number, string>;
  #asRoot = process.getuid?.() === 0;

  constructor(opts: { passwdPath?: string; groupPath?: string } = {}) {
    this.#passwd = cachedFile(() => opts.passwdPath ?? "/etc/passwd", parsePasswd, []);
    this.#groups = cachedFile(() => opts.groupPath ?? "/etc/group", parseGroup, new Map());
  }

  /** Links resolved as the kernel would (the sandbox is the host); what does not exist (yet) below
   * the deepest part that does stays as written (no link there to resolve), so a file operation
   * can walk the result without meeting a link (pinned-path.ts). */
  toHost(sandboxPath: string, opts?: { followFinal?: boolean }): string {
    const path = resolve(sandboxPath);
    let head = (opts?.followFinal ?? true) ? path : dirname(path);
    let tail = head === path ? "" : basename(path);
    for (;;) {
      try {
        return join(realpathSync(head), tail);
      } catch {
        if (head === "/") return path;
        tail = join(basename(head), tail);
        head = dirname(head);
      }
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
