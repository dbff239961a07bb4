// `npm start`'s part of the `base` template's root filesystem: when it is not built yet, build it
// in the background (minutes, from Debian's archive: controllers/drivers/local/rootfs/README.md)
// and report progress, while the system serves sandboxes with the view of the host. The agent
// looks the template up at every create, so sandboxes created once it is ready get it; claimed
// ones created before keep the host view until they are killed, and the warm pool's unclaimed
// ones are replaced once `npm start` re-puts the template with the build's `rootfsId`.
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";

export type Log = (line: string) => void;

/** cli.ts's exit code after a Ctrl-C (it removed its half-built layer). */
const INTERRUPTED = 130;

/** The builder's own lines (`unpacked 50 packages`, `configured 50 packages`: build-base.ts
 * counts dpkg's steps), mmdebstrap's stage lines (`I: downloading packages...`) and its errors;
 * its warnings are left out of the terminal. */
export function progressLine(line: string): string | undefined {
  const m = /^\[rootfs\] (mmdebstrap: )?(.*)$/.exec(line);
  if (!m) return line.trim() ? line : undefined;
  if (!m[1]) return m[2];
  const text = m[2]!;
  if (/^I: /.test(text)) return text.slice(3);
  if (/^E: /.test(text)) return text;
  return undefined;
}

/** Starts the build when `base` is missing; undefined when it is there. The builder gets
 * Ctrl-C with the terminal's process group and cleans up after itself (mmdebstrap does). */
export function buildBaseInBackground(log: Log, store = new RootfsStore()): ChildProcess | undefined {
  if (store.templateTrees("base")) return undefined;
  log(`the base template's root filesystem is not built yet in ${store.root}: building it in the background (minutes); until it is ready, sandboxes see the host's files (today's view)`);
  const child = buildInBackground("build-base", log);
  child.on("close", (code, signal) => {
    if (code === 0) log("the base template is ready: sandboxes created from now on get a root filesystem of their own");
    else if (code === INTERRUPTED) log("building the base template stopped (Ctrl-C); the next npm start builds it again");
    else log(`building the base template failed (${signal ?? `exit ${code}`}); sandboxes keep the host's view. See the lines above; retry with: node controllers/drivers/local/rootfs/cli.ts build-base`);
  });
  return child;
}

function buildInBackground(command: string, log: Log): ChildProcess {
  const child = spawn(process.execPath, ["controllers/drivers/local/rootfs/cli.ts", command], { stdio: ["ignore", "pipe", "pipe"] });
  for (const stream of [child.stdout!, child.stderr!]) {
    createInterface({ input: stream }).on("line", (line) => {
      const shown = progressLine(line);
      if (shown !== undefined) log(shown);
    });
  }
  return child;
}

/** Resolves once the builder has ended: true when it built `base`. */
export function baseBuilt(child: ChildProcess): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode === 0);
  return new Promise((resolve) => child.once("exit", (code) => resolve(code === 0)));
}
