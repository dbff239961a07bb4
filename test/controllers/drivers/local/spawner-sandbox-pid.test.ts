// The pid a command's start reports is the command's, not enter.pl's child before its exec: the
// child forks, switches user and only then execs the command, and a start reported in between
// named a perl still running as the sandbox's root (CI: the e2e `ps` check found no `sleep` of
// the user's uid right after a background start). A stand-in for enter.pl forks a child that
// execs only once the test lets it.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { PERL } from "../../../../controllers/drivers/local/host-helpers.ts";
import { sandboxPidOf } from "../../../../controllers/drivers/local/spawner-sandbox-pid.ts";
import { waitFor } from "../../../support/wait-for.ts";

const cmdline = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
  } catch {
    return [];
  }
};

describe("sandboxPidOf", () => {
  it("reports the child once it runs the command, not while it is still the wrapper", async () => {
    // The child waits for a line on stdin before its exec, as enter.pl's child does its setns,
    // user switch and capability drop before it.
    const wrapper = spawn(PERL, ["-e", 'my $c = fork(); if (!$c) { my $go = <STDIN>; exec "sleep", "30"; } waitpid($c, 0);'], { stdio: ["pipe", "ignore", "inherit"] });
    let ended = false;
    wrapper.once("exit", () => (ended = true));
    try {
      let atReport: string[] = [];
      const reported = sandboxPidOf(wrapper.pid!, () => ended).then((pid) => {
        atReport = pid === undefined ? [] : cmdline(pid);
        return pid;
      });
      const child = await waitFor(() => readFileSync(`/proc/${wrapper.pid}/task/${wrapper.pid}/children`, "utf8").trim() || undefined, { what: "the fork" });
      // Room for a report made too early (the look-up polls every millisecond); not a timing of
      // the outcome: the right report cannot come before the exec below, however long this is.
      await Promise.race([reported, new Promise((r) => setTimeout(r, 300))]);
      wrapper.stdin!.write("go\n");
      expect(await reported).toBe(Number(child));
      expect(atReport).toEqual(["sleep", "30"]);
    } finally {
      const children = cmdline(wrapper.pid!).length ? readFileSync(`/proc/${wrapper.pid}/task/${wrapper.pid}/children`, "utf8").trim().split(" ").filter(Boolean) : [];
      for (const pid of children) process.kill(Number(pid), "SIGKILL");
      wrapper.kill("SIGKILL");
    }
  });
});
