import { describe, expect, it } from "vitest";
import { exitInfo } from "../../../controllers/runtime/process/exit-status.ts";

describe("exitInfo (Go's ProcessState strings)", () => {
  it.each([
    [0, null, { exitCode: 0, exited: true, status: "exit status 0" }],
    [3, null, { exitCode: 3, exited: true, status: "exit status 3", error: "exit status 3" }],
    [null, "SIGKILL", { exitCode: -1, exited: false, status: "signal: killed", error: "signal: killed" }],
    [null, "SIGTERM", { exitCode: -1, exited: false, status: "signal: terminated", error: "signal: terminated" }],
    [0, 11, { exitCode: -1, exited: false, status: "signal: segmentation fault", error: "signal: segmentation fault" }],
  ] as const)("code %s signal %s", (code, signal, want) => {
    expect(exitInfo(code, signal)).toEqual(want);
  });
});
