// The hook runner's pure parts: the Connect stream of a Start call (exit code, output, errors,
// a stream cut short) and what an outcome means under each failure policy.
import { describe, expect, it } from "vitest";
import { decodeProcessStream, startRequestBody } from "../../../../durable-objects/hooks/connect-stream.ts";
import { hookVerdict } from "../../../../durable-objects/hooks/run-hook.ts";

function envelope(msg: unknown, flags = 0): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(msg));
  const out = new Uint8Array(5 + json.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, json.length);
  out.set(json, 5);
  return out;
}
const cat = (...parts: Uint8Array[]) => Uint8Array.from(parts.flatMap((p) => [...p]));
const b64 = (s: string) => btoa(s);

describe("the Start stream", () => {
  it("frames the request as one JSON envelope", () => {
    const body = startRequestBody(["sh", "-c", "exit 3"]);
    expect(body[0]).toBe(0);
    expect(JSON.parse(new TextDecoder().decode(body.subarray(5)))).toEqual({ process: { cmd: "sh", args: ["-c", "exit 3"], envs: {} }, stdin: false });
  });

  it("collects output and the exit code", () => {
    const run = decodeProcessStream(
      cat(
        envelope({ event: { start: { pid: 7 } } }),
        envelope({ event: { data: { stdout: b64("out\n") } } }),
        envelope({ event: { data: { stderr: b64("busy\n") } } }),
        envelope({ event: { end: { exitCode: 3, exited: true, status: "exit status 3", error: "exit status 3" } } }),
        envelope({}, 2),
      ),
    );
    expect(run).toEqual({ stdout: "out\n", stderr: "busy\n", exitCode: 3, error: "exit status 3" });
  });

  it("a zero exit omits exitCode in JSON; a refused start is the end-stream error; a cut stream has no exit code", () => {
    expect(decodeProcessStream(cat(envelope({ event: { end: { exited: true } } }), envelope({}, 2))).exitCode).toBe(0);
    expect(decodeProcessStream(envelope({ error: { code: "invalid_argument", message: "no such file" } }, 2))).toMatchObject({ exitCode: null, error: "invalid_argument: no such file" });
    const whole = envelope({ event: { end: { exitCode: 1 } } });
    expect(decodeProcessStream(cat(envelope({ event: { start: { pid: 1 } } }), whole.subarray(0, 8))).exitCode).toBeNull();
  });
});

describe("hookVerdict", () => {
  const failed = { ok: false, reason: "Timeout", message: "did not finish within 1 s" } as const;
  it("a success proceeds with a True condition", () => {
    expect(hookVerdict("prePause", { failurePolicy: "Fail" }, { ok: true, reason: "Succeeded", message: "exit code 0" })).toEqual({
      proceed: true,
      condition: { type: "PrePauseHook", status: "True", reason: "Succeeded", message: "exit code 0" },
      refusal: null,
    });
  });
  it("a failure under Fail stops with the hook's message", () => {
    expect(hookVerdict("prePause", { failurePolicy: "Fail" }, failed)).toEqual({
      proceed: false,
      condition: { type: "PrePauseHook", status: "False", reason: "Timeout", message: "did not finish within 1 s" },
      refusal: "prePause hook failed: did not finish within 1 s",
    });
  });
  it("a failure under Ignore proceeds and says it was ignored", () => {
    expect(hookVerdict("postUpgrade", { failurePolicy: "Ignore" }, failed)).toMatchObject({ proceed: true, condition: { type: "PostUpgradeHook", status: "False", reason: "TimeoutIgnored" }, refusal: null });
  });
});
