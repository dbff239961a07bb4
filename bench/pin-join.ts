// What joining a sandbox's pid 1 through a checked /proc handle (proc-handle.ts) costs, for an
// A/B against a commit that joined by pid: the files API's pin of a path under the sandbox's root
// (what every files call through `/proc/<pid 1>/root` pays), an `allow-setuid` request to
// userns.pl (once per sandbox start with a user namespace), and the shell that closes a build
// step's network fd before bwrap (once per step; the nsenter itself is the same either way).
//   node bench/pin-join.ts [pins] [requests]    prints one JSON line (µs / ms medians)
// Needs root. Run under the machine's test lock; run it in both worktrees, interleaved.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { LocalDriver } from "../controllers/drivers/local/local-driver.ts";
import type { LocalSandboxView } from "../controllers/drivers/local/local-view.ts";
import { procStart } from "../controllers/drivers/local/holder.ts";
import { helperEnv, PERL, syscallNumbers } from "../controllers/drivers/local/host-helpers.ts";
import { USERNS_SCRIPT } from "../controllers/drivers/local/userns.ts";
import { percentile } from "./stats.ts";

const pins = Number(process.argv[2] ?? 2000);
const requests = Number(process.argv[3] ?? 30);
const median = (xs: number[]) => percentile(xs, 50);

const dataDir = mkdtempSync(join(tmpdir(), "bench-pin-join-"));
const driver = new LocalDriver({ dataDir, cgroupName: `kruise-bench-${process.pid}-pin-join` });
const id = `pj${process.pid}`;
const out: Record<string, number | string> = { level: driver.capabilities.level };
try {
  await driver.ensure({ id, generation: 1, template: "base", state: "Running", pauseStrategy: "Freeze", resources: { cpuCount: 1, memoryMB: 256 }, allowInternetAccess: false });
  const view = driver.view(id) as LocalSandboxView;
  // /usr is read-only in the sandbox: served from pid 1's root, the path that joins it.
  const pinUs = (path: string) => {
    const t: number[] = [];
    for (let i = 0; i < pins; i++) {
      const s = process.hrtime.bigint();
      view.pin(path).close();
      t.push(Number(process.hrtime.bigint() - s) / 1e3);
    }
    return Math.round(median(t) * 10) / 10;
  };
  pinUs("/usr/bin/env"); // warm
  out.pin_root_us = pinUs("/usr/bin/env");
  out.pin_root_deep_us = pinUs("/usr/share/doc/bash/copyright");
  out.pin_home_us = pinUs("/home/user");

  // allow-setuid against a process with a user and mount namespace of its own (a holder's
  // stand-in); the request's form is whichever this commit's userns.pl takes.
  const nr = syscallNumbers();
  const holder = spawn("/usr/bin/unshare", ["--user", "--map-root-user", "--mount", "--", "/usr/bin/sleep", "300"], { stdio: "ignore" });
  for (let i = 0; i < 100 && readFileSync(`/proc/${holder.pid}/comm`, "utf8") !== "sleep\n"; i++) await new Promise((r) => setTimeout(r, 20));
  const start = procStart(holder.pid!);
  const helper = spawn(PERL, [USERNS_SCRIPT, "3000000000", "1", String(nr.unshare), String(nr.openTree), String(nr.mountSetattr), String(nr.moveMount)], { env: helperEnv(), stdio: ["pipe", "pipe", "inherit"] });
  const answers = createInterface({ input: helper.stdout! })[Symbol.asyncIterator]();
  const next = async () => String((await answers.next()).value);
  await next(); // its pid
  let form = `${holder.pid}:${start}`;
  helper.stdin!.write(`allow-setuid ${form} ${nr.setns} ${nr.mount}\n`);
  if ((await next()) !== "ok") {
    form = String(holder.pid);
    helper.stdin!.write(`allow-setuid ${form} ${nr.setns} ${nr.mount}\n`);
    const a = await next();
    if (a !== "ok") throw new Error(`allow-setuid: ${a}`);
  }
  out.allow_setuid_form = form.includes(":") ? "pid:start" : "pid";
  const t: number[] = [];
  for (let i = 0; i < requests; i++) {
    const s = process.hrtime.bigint();
    helper.stdin!.write(`allow-setuid ${form} ${nr.setns} ${nr.mount}\n`);
    const a = await next();
    t.push(Number(process.hrtime.bigint() - s) / 1e6);
    if (a !== "ok") throw new Error(`allow-setuid: ${a}`);
  }
  out.allow_setuid_ms = Math.round(median(t) * 1000) / 1000;
  helper.stdin!.end();
  holder.kill("SIGKILL");

  // The step's nsenter with and without the shell that closes the handed-over fd.
  const ns = `/proc/${process.pid}/ns/net`;
  const nsenterMs = (argv: string[]) => {
    const t: number[] = [];
    for (let i = 0; i < requests; i++) {
      const s = process.hrtime.bigint();
      spawnSync("nsenter", [`--net=${ns}`, "--", ...argv], { stdio: "ignore" });
      t.push(Number(process.hrtime.bigint() - s) / 1e6);
    }
    return Math.round(median(t) * 1000) / 1000;
  };
  out.nsenter_true_ms = nsenterMs(["/bin/true"]);
  out.nsenter_sh_true_ms = nsenterMs(["/bin/sh", "-c", 'exec "$@" 9<&-', "sh", "/bin/true"]);
} finally {
  await driver.destroy(id).catch(() => undefined);
  await driver.dispose();
  rmSync(dataDir, { recursive: true, force: true });
}
console.log(JSON.stringify(out));
