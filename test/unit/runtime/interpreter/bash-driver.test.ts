// The bash kernel driver's line protocol, driven as the runtime drives it, with this Node and the
// machine's bash (the sandbox runs it with its own; the e2e tier covers that).
import { describe, expect, it } from "vitest";
import { BASH_DRIVER_SOURCE } from "../../../../controllers/runtime/interpreter/bash-driver-source.ts";
import type { OutputLine } from "../../../../schema/interpreter/http.ts";
import { driver, error } from "./driver-harness.ts";

const text = (lines: OutputLine[], kind: "stdout" | "stderr") => lines.filter((l) => l.type === kind).map((l) => (l as { text: string }).text).join("");

describe("bash kernel driver", () => {
  it("keeps cwd, variables and functions across cells; streams stdout and stderr", async () => {
    const { run } = await driver(BASH_DRIVER_SOURCE);
    expect(error(await run("cd /tmp; X=5; f() { echo \"f$1\"; }"))).toBeUndefined();
    const lines = await run("pwd; echo $X; f 7; echo oops >&2; printf 'no newline'");
    expect(text(lines, "stdout")).toBe("/tmp\n5\nf7\nno newline");
    expect(text(lines, "stderr")).toBe("oops\n");
  });

  it("a non-zero status is the cell's error; a syntax error does not end bash", async () => {
    const { run } = await driver(BASH_DRIVER_SOURCE);
    await run("Y=1");
    expect(error(await run("false"))?.value).toBe("exit status 1");
    expect(error(await run("echo 'unbalanced"))?.value).toBe("exit status 2");
    expect(text(await run("echo $Y"), "stdout")).toBe("1\n");
  });

  it("env vars for one cell; SIGINT ends the running cell and keeps the state", async () => {
    const { run, p } = await driver(BASH_DRIVER_SOURCE);
    expect(text(await run("echo \"[$E2B_T]\"", { E2B_T: "it's on" }), "stdout")).toBe("[it's on]\n");
    expect(text(await run("echo \"[${E2B_T-unset}]\""), "stdout")).toBe("[unset]\n");
    const busy = run("Z=2; while true; do sleep 1; done");
    setTimeout(() => p.kill("SIGINT"), 300);
    expect(error(await busy)?.value).toBe("exit status 130");
    expect(text(await run("echo $Z"), "stdout")).toBe("2\n");
  });
});
