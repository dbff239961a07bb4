// The Connect protocol's streaming framing for one `process.Process/Start` call with JSON
// messages: each message is an envelope (1 flag byte, a 4-byte big-endian length, the JSON); the
// last one has flag 0x02 and carries the stream's end (an error, if any). Pure, so the decoding is
// unit-tested without a runtime.

const END_STREAM = 0x02;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A StartRequest for `command` (file, then arguments), without a PTY or stdin. */
export function startRequestBody(command: string[]): Uint8Array<ArrayBuffer> {
  const json = encoder.encode(JSON.stringify({ process: { cmd: command[0], args: command.slice(1), envs: {} }, stdin: false }));
  const out = new Uint8Array(5 + json.length);
  new DataView(out.buffer).setUint32(1, json.length);
  out.set(json, 5);
  return out;
}

export interface ProcessRun {
  stdout: string;
  stderr: string;
  /** null when the stream ended without an end event (cut short). */
  exitCode: number | null;
  /** The stream's or the end event's error. */
  error: string | null;
}

interface EventMessage {
  event?: { data?: { stdout?: string; stderr?: string }; end?: { exitCode?: number; exited?: boolean; error?: string } };
}

/** Decodes the whole response of a Start call. */
export function decodeProcessStream(bytes: Uint8Array): ProcessRun {
  const run: ProcessRun = { stdout: "", stderr: "", exitCode: null, error: null };
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  while (at + 5 <= bytes.length) {
    const flags = bytes[at]!;
    const len = view.getUint32(at + 1);
    if (at + 5 + len > bytes.length) break;
    const text = decoder.decode(bytes.subarray(at + 5, at + 5 + len));
    at += 5 + len;
    let msg: unknown;
    try {
      msg = JSON.parse(text);
    } catch {
      run.error = "the runtime sent a malformed message";
      break;
    }
    if (flags & END_STREAM) {
      const err = (msg as { error?: { code?: string; message?: string } }).error;
      if (err) run.error = `${err.code ?? "error"}: ${err.message ?? ""}`.trim();
      break;
    }
    const ev = (msg as EventMessage).event;
    if (ev?.data?.stdout) run.stdout += b64(ev.data.stdout);
    if (ev?.data?.stderr) run.stderr += b64(ev.data.stderr);
    if (ev?.end) {
      run.exitCode = ev.end.exitCode ?? 0;
      if (ev.end.error) run.error = ev.end.error;
    }
  }
  return run;
}

function b64(s: string): string {
  try {
    return decoder.decode(Uint8Array.from(atob(s), (c) => c.charCodeAt(0)));
  } catch {
    return "";
  }
}
