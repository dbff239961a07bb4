// The kernel driver's Python source, run inside the sandbox as `python3 -c <source> <kernel>`.
// Kept as a string so the runtime's bundle (a pod's runtime) carries it too.
import { KERNEL_FORMATTERS_PY } from "./kernel-formatters-source.ts";

export const KERNEL_DRIVER_PY = String.raw`# The code interpreter's kernel driver: runs inside the sandbox as the sandbox's user, one per
# context. It starts a Jupyter kernel with jupyter_client, talks to it over ZeroMQ and speaks NDJSON with the
# agent-runtime over stdin/stdout:
#   in:  {"op":"execute","id":N,"code":"...","env":{...}}  {"op":"cancel","id":N}  {"op":"restart","id":N}
#   out: {"ready":true}  {"id":N,"line":{E2B output line}}  {"id":N,"done":true}
# The output lines are E2B's /execute NDJSON (stdout, stderr, result, error, number_of_executions,
# end_of_execution). Interrupts go straight to the kernel from the reader thread, so a cell that
# never returns is still interruptible.
import json, os, queue, sys, threading, time

from jupyter_client.manager import KernelManager

KERNEL = sys.argv[1] if len(sys.argv) > 1 else "python3"
out_lock = threading.Lock()
out = sys.stdout
sys.stdout = sys.stderr  # nothing else may write to the protocol stream

MIME = {"text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/png": "png",
        "image/jpeg": "jpeg", "image/svg+xml": "svg", "application/pdf": "pdf", "text/latex": "latex",
        "application/json": "json", "application/javascript": "javascript",
        # E2B's own formats (kernel-formatters-source.ts): a figure's chart, a DataFrame's data.
        "e2b/chart": "chart", "e2b/data": "data"}
# Run in the kernel after each start: E2B's extra display formats.
FORMATTERS = ${JSON.stringify(KERNEL_FORMATTERS_PY)}


def send(*msgs):
    # Several messages leave in one write: the runtime wakes up once for a cell's last line and its end.
    data = "".join(json.dumps(m, separators=(",", ":"), default=str) + "\n" for m in msgs)
    with out_lock:
        out.write(data)
        out.flush()


def now_us():
    return int(time.time() * 1_000_000)


def result_of(data, main):
    res = {"type": "result", "is_main_result": main}
    extra = {}
    for mime, value in data.items():
        if mime in MIME:
            if value or MIME[mime] not in ("chart", "data"):
                res[MIME[mime]] = value
        else:
            extra[mime] = value
    if extra:
        res["extra"] = extra
    return res


km = KernelManager(kernel_name=KERNEL)
km.start_kernel()
kc = km.client()
kc.start_channels()
kc.wait_for_ready(timeout=120)
# The cells go through plain blocking ZeroMQ sockets of the driver's own: jupyter_client 7's blocking
# client runs an asyncio loop (nest_asyncio) for every message it sends or receives and parses the
# dates of every header, most of the driver's CPU per cell (the kernel's own work is the same).
kc.stop_channels()
session = km.session
shell = km.connect_shell()
iopub = km.connect_iopub()
DELIM = b"<IDS|MSG>"


def recv_iopub(timeout_ms):
    """The next iopub message as (msg_type, parent msg_id, content), or None after timeout_ms. Its
    signature is not checked: only the sandbox's own processes (the kernel) can publish here, and
    what the driver makes of a message is data to the runtime."""
    if not iopub.poll(timeout_ms):
        return None
    parts = iopub.recv_multipart()
    i = parts.index(DELIM)
    header, parent, content = json.loads(parts[i + 2]), json.loads(parts[i + 3]), json.loads(parts[i + 5])
    return header.get("msg_type"), parent.get("msg_id"), content


def send_shell(msg_type, content):
    msg = session.msg(msg_type, content)
    session.send(shell, msg)
    return msg["header"]["msg_id"]


def drain_shell():
    # The replies on the shell channel say nothing iopub did not: read and dropped.
    while shell.poll(0):
        shell.recv_multipart()


def wait_ready(timeout=120):
    """Until the kernel answers through the driver's own sockets: a new SUB socket's subscription
    takes a moment to reach the publisher, and a restarted kernel a moment to start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mid = send_shell("kernel_info_request", {})
        end = time.monotonic() + 1
        while time.monotonic() < end:
            m = recv_iopub(100)
            if m and m[1] == mid and m[0] == "status" and m[2].get("execution_state") == "idle":
                drain_shell()
                return
    raise RuntimeError("the kernel did not answer within %d s" % timeout)


wait_ready()

jobs = queue.Queue()
state = {"current": None, "cancelled": set()}


def run(code, emit, silent=False):
    """Runs one cell; emit(line) gets E2B output lines. Returns when the kernel is idle again."""
    msg_id = send_shell("execute_request", {"code": code, "silent": silent, "store_history": not silent,
                                            "user_expressions": {}, "allow_stdin": False, "stop_on_error": False})
    while True:
        msg = recv_iopub(1000)
        if msg is None:
            if not km.is_alive():
                # E2B's own words for a cell whose kernel restarted under it (its server's
                # ContextRestarting), so code written against E2B recognises it.
                emit({"type": "error", "name": "ContextRestarting", "value": "Context was restarted", "traceback": ""})
                km.restart_kernel(now=True)
                wait_ready()
                install_formatters()
                return
            continue
        kind, parent_id, content = msg
        if parent_id != msg_id:
            continue
        if kind == "stream":
            emit({"type": "stdout" if content["name"] == "stdout" else "stderr", "text": content["text"], "timestamp": now_us()})
        elif kind == "execute_result":
            emit(result_of(content["data"], True))
        elif kind == "display_data":
            emit(result_of(content["data"], False))
        elif kind == "error":
            emit({"type": "error", "name": content["ename"], "value": content["evalue"], "traceback": "\n".join(content["traceback"])})
        elif kind == "execute_input" and not silent:
            emit({"type": "number_of_executions", "execution_count": content["execution_count"]})
        elif kind == "status" and content["execution_state"] == "idle":
            drain_shell()
            return


def install_formatters():
    if not KERNEL.startswith("python"):  # the formatters are Python (matplotlib, pandas)
        return
    errors = []
    run(FORMATTERS, lambda line: errors.append(line) if line.get("type") == "error" else None, silent=True)
    for e in errors:  # the kernel still runs cells, without charts: say why on the driver's stderr
        print("e2b formatters:", e.get("name"), e.get("value"), file=sys.stderr)


# The env's values travel as data, never code: a JSON string literal (Python), base64 of JSON (R).
if KERNEL == "ir":
    def r_env(env):
        import base64
        return "jsonlite::fromJSON(rawToChar(jsonlite::base64_dec('%s')))" % base64.b64encode(json.dumps(env).encode()).decode()

    def set_env_code(env):
        return (".e2b_new_env <- %s\n"
                ".e2b_saved_env <- Sys.getenv(names(.e2b_new_env), unset = NA, names = TRUE)\n"
                "do.call(Sys.setenv, .e2b_new_env); rm(.e2b_new_env)\n" % r_env(env))

    def restore_env_code(keys):
        return ("for (.e2b_k in names(.e2b_saved_env)) if (is.na(.e2b_saved_env[[.e2b_k]])) Sys.unsetenv(.e2b_k) "
                "else do.call(Sys.setenv, setNames(list(.e2b_saved_env[[.e2b_k]]), .e2b_k))\n"
                "rm(.e2b_saved_env, .e2b_k)\n")

    def global_env_code(env):
        return "do.call(Sys.setenv, %s)\n" % r_env(env)
else:
    def restore_env_code(keys):
        return ("import os as _e2b_os\n"
                "for _e2b_k, _e2b_v in _e2b_saved_env.items():\n"
                "    _e2b_os.environ.pop(_e2b_k, None) if _e2b_v is None else _e2b_os.environ.__setitem__(_e2b_k, _e2b_v)\n"
                "del _e2b_saved_env, _e2b_k, _e2b_v\n")

    def set_env_code(env):
        return ("import os as _e2b_os, json as _e2b_json\n"
                f"_e2b_new_env = _e2b_json.loads({json.dumps(json.dumps(env))})\n"
                "_e2b_saved_env = {k: _e2b_os.environ.get(k) for k in _e2b_new_env}\n"
                "_e2b_os.environ.update(_e2b_new_env)\n"
                "del _e2b_new_env\n")

    def global_env_code(env):
        return ("import os as _e2b_os, json as _e2b_json\n"
                f"_e2b_os.environ.update(_e2b_json.loads({json.dumps(json.dumps(env))}))\n")


def worker():
    while True:
        job = jobs.get()
        jid = job["id"]
        if jid in state["cancelled"]:
            state["cancelled"].discard(jid)
            send({"id": jid, "done": True})
            continue
        state["current"] = jid
        last = []
        # The cell's number (the kernel's execute_input, at its start) travels with its first output
        # or its end: a cell with no output is one write back, and the runtime wakes up once for it.
        held = []

        def emit(line):
            if line.get("type") == "number_of_executions":
                held.append({"id": jid, "line": line})
                return
            send(*held, {"id": jid, "line": line})
            held.clear()

        try:
            if job["op"] == "restart":
                km.restart_kernel(now=True)
                wait_ready()
                install_formatters()
            else:
                if job.get("global_env"):  # the sandbox's env changed since the kernel started: for good
                    run(global_env_code(job["global_env"]), lambda line: None, silent=True)
                env = job.get("env") or {}
                if env:
                    run(set_env_code(env), lambda line: None, silent=True)
                run(job["code"], emit)
                if env:
                    run(restore_env_code(env), lambda line: None, silent=True)
                last = [{"id": jid, "line": {"type": "end_of_execution"}}]
        except Exception as err:  # the runtime reports it; the driver keeps serving
            last = [{"id": jid, "line": {"type": "error", "name": type(err).__name__, "value": str(err), "traceback": ""}}]
        finally:
            state["current"] = None
            send(*held, *last, {"id": jid, "done": True})


install_formatters()
threading.Thread(target=worker, daemon=True).start()
send({"ready": True, "pid": os.getpid()})

for raw in sys.stdin:
    try:
        cmd = json.loads(raw)
    except ValueError:
        continue
    if cmd.get("op") == "cancel":
        if state["current"] == cmd["id"]:
            km.interrupt_kernel()
        else:
            state["cancelled"].add(cmd["id"])
    else:
        jobs.put(cmd)

km.shutdown_kernel(now=True)
`;
