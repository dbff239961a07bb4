// A script root inside a sandbox runs to end its own pid 1: ptrace attach, then resume it with
// SIGKILL (python3's ctypes; the unkillable-init rule does not stop a tracer's signal). The local
// driver's and the e2e tier's tests of a pid 1 that ends share it. It refuses to run where pid 1
// is in the test's own pid namespace (a `process`-level sandbox: pid 1 is the host's init).
import { readlinkSync } from "node:fs";

const HOST_PID_NS = readlinkSync("/proc/self/ns/pid");

export const PTRACE_KILL_PID1 = `python3 - <<'EOF'
import ctypes, os
if os.readlink("/proc/1/ns/pid") == "${HOST_PID_NS}": raise SystemExit("refused: pid 1 is the host's init")
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
if libc.ptrace(16, 1, None, None) != 0: raise OSError(ctypes.get_errno(), "PTRACE_ATTACH (Yama's ptrace_scope may refuse it)")
os.waitpid(1, 0x40000000)
libc.ptrace(7, 1, None, 9)
EOF`;
