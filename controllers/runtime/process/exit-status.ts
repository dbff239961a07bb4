// The `end` event as envd fills it from Go's os.ProcessState: exit_code is -1 and exited false
// for a signal, status/error are ProcessState.String() ("exit status 3", "signal: killed").
import { constants } from "node:os";

export interface EndInfo {
  exitCode: number;
  exited: boolean;
  status: string;
  error?: string;
}

// Go's syscall signal table (zsignal_linux), which is what ProcessState.String() prints.
const GO_SIGNAL_NAMES: Record<number, string> = {
  1: "hangup", 2: "interrupt", 3: "quit", 4: "illegal instruction", 5: "trace/breakpoint trap",
  6: "aborted", 7: "bus error", 8: "floating point exception", 9: "killed",
  10: "user defined signal 1", 11: "segmentation fault", 12: "user defined signal 2",
  13: "broken pipe", 14: "alarm clock", 15: "terminated", 16: "stack fault", 17: "child exited",
  18: "continued", 19: "stopped (signal)", 20: "stopped", 21: "stopped (tty input)",
  22: "stopped (tty output)", 23: "urgent I/O condition", 24: "CPU time limit exceeded",
  25: "file size limit exceeded", 26: "virtual timer expired", 27: "profiling timer expired",
  28: "window changed", 29: "I/O possible", 30: "power failure", 31: "bad system call",
};

function signalNumber(signal: NodeJS.Signals | number): number {
  return typeof signal === "number" ? signal : (constants.signals[signal] ?? 0);
}

/** From child_process ('exit' code/signal) or node-pty (exitCode, signal number or 0). */
export function exitInfo(code: number | null, signal: NodeJS.Signals | number | null | undefined): EndInfo {
  if (signal) {
    const n = signalNumber(signal);
    const status = `signal: ${GO_SIGNAL_NAMES[n] ?? `signal ${n}`}`;
    return { exitCode: -1, exited: false, status, error: status };
  }
  const c = code ?? 0;
  const status = `exit status ${c}`;
  return c === 0 ? { exitCode: 0, exited: true, status } : { exitCode: c, exited: true, status, error: status };
}
