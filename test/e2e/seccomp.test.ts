// The sandbox's seccomp filter (controllers/drivers/local/seccomp.ts), through the real e2b SDK:
// a denied syscall fails with the errno chosen for it (EPERM, or ENOSYS where software falls
// back), for root and for user, in a command and in one started in the background; personality(2)
// takes Docker's values only; the x32 ABI kills the caller; a new user namespace is refused
// (unshare -Urn), unless the operator gave the template `nestedUserNamespaces`, while threads,
// fork, posix_spawn and vfork-style spawns work (clone3 is ENOSYS, and libc falls back to clone);
// every process of the sandbox (its pid 1 too) and a template's build steps and start command run
// filtered, and so do the code interpreter's kernel and every process beside it; and what
// sandboxes do every day still works.
import { Sandbox as CodeInterpreter } from "@e2b/code-interpreter";
import { Sandbox, Template, waitForFile } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { seedCodeInterpreter } from "../../scripts/seed.ts";
import { removeBuiltLayers } from "../support/built-layers.ts";
import { admin, e2b, uniqueTag } from "./sdk.ts";

/** Calls each syscall through libc's syscall(2) and prints `name errno-name` (`name ok` when it
 * succeeded); the arguments are harmless (a bad pointer or size where the call would do
 * anything). */
const PROBE = String.raw`
import ctypes, errno, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *a):
    r = libc.syscall(nr, *a)
    print(name, "ok" if r != -1 else errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()), flush=True)
call("keyctl", 250, 0, 0)
call("bpf", 321, 0, 0, 0)
call("userfaultfd", 323, 0)
call("perf_event_open", 298, 0, 0, 0, 0, 0)
call("open_by_handle_at", 304, -1, 0, 0)
call("init_module", 175, 0, 0, 0)
call("io_uring_setup", 425, 1, 0)
call("fsopen", 430, b"tmpfs", 0)
try:
    socket.socket(40, socket.SOCK_STREAM).close(); print("vsock ok")
except OSError as e:
    print("vsock", errno.errorcode[e.errno])
call("personality ADDR_NO_RANDOMIZE", 135, 0x0040000)
call("personality query", 135, 0xffffffff)
call("getpid", 39)
if len(sys.argv) > 1:
    call("x32 getpid", 0x40000000 | 39)
    print("still alive")
`;

const EXPECTED = ["keyctl EPERM", "bpf EPERM", "userfaultfd EPERM", "perf_event_open EPERM", "open_by_handle_at EPERM", "init_module EPERM", "io_uring_setup ENOSYS", "fsopen ENOSYS", "vsock EPERM", "personality ADDR_NO_RANDOMIZE EPERM", "personality query ok", "getpid ok"];

const probe = (extra = "") => `python3 - ${extra} <<'EOF'\n${PROBE}\nEOF`;

let sbx: Sandbox;
const store = new RootfsStore();
const outputs: string[] = [];
const startedAt = Date.now();
beforeAll(async () => {
  sbx = await Sandbox.create(e2b());
});
afterAll(async () => {
  await sbx?.kill().catch(() => false);
  await removeBuiltLayers(store, outputs, startedAt);
});

describe("seccomp filter", () => {
  it("refuses the denied syscalls with EPERM, io_uring and the new mount API with ENOSYS, for root and user", async () => {
    for (const user of ["user", "root"] as const) {
      const r = await sbx.commands.run(probe(), { user });
      expect(r.stdout.trim().split("\n"), user).toEqual(EXPECTED);
    }
  });

  it("kills a process that calls through the x32 ABI (SIGSYS)", async () => {
    const r = await sbx.commands.run(`${probe("x32")}\necho "status $?"`, { user: "root" });
    expect(r.stdout).toContain("getpid ok\n");
    expect(r.stdout).not.toContain("still alive");
    expect(r.stdout.trim().split("\n").at(-1)).toBe("status 159"); // 128 + SIGSYS (31)
  });

  it("every process of the sandbox is filtered: its pid 1, commands, background commands", async () => {
    const bg = await sbx.commands.run("sleep 300", { background: true, user: "root" });
    try {
      const r = await sbx.commands.run("grep -H '^Seccomp:' /proc/[0-9]*/status", { user: "root" });
      const lines = r.stdout.trim().split("\n");
      const byPid = new Map(lines.map((l) => [Number(/^\/proc\/(\d+)\//.exec(l)![1]), l.split(/\s+/).at(-1)]));
      expect(byPid.get(1)).toBe("2");
      expect(byPid.get(bg.pid)).toBe("2");
      expect([...new Set(byPid.values())]).toEqual(["2"]);
    } finally {
      await sbx.commands.kill(bg.pid);
    }
  });

  it("refuses a new user namespace to user and root (unshare -Urn): Operation not permitted; other namespaces stay open to root", async () => {
    for (const user of ["user", "root"] as const) {
      const r = await sbx.commands.run("unshare -Urn true; echo \"status $?\"; python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); print(\"clone3\", l.syscall(435, 0, 0), ctypes.get_errno())'", { user });
      expect(r.stderr, user).toContain("Operation not permitted");
      expect(r.stdout, user).toBe("status 1\nclone3 -1 38\n");
    }
    const ns = await sbx.commands.run("unshare --mount --net sh -c 'mount -t tmpfs none /mnt && echo in-ns > /mnt/f && cat /mnt/f'", { user: "root" });
    expect(ns.stdout).toBe("in-ns\n");
  });

  it("threads, fork, posix_spawn and vfork-style spawns still work (clone3 refused, clone taken instead)", async () => {
    const py = String.raw`
import os, subprocess, threading
out = []
t = threading.Thread(target=lambda: out.append("thread ok")); t.start(); t.join(); print(out[0])
pid = os.fork()
if pid == 0: os._exit(7)
print("fork", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
pid = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 3"], dict(os.environ))
print("posix_spawn", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print("subprocess", subprocess.run(["sh", "-c", "exit 4"]).returncode)
`;
    const js = String.raw`
const { Worker } = require("worker_threads");
new Worker("require('worker_threads').parentPort.postMessage(6 * 7)", { eval: true }).on("message", (m) => {
  console.log("worker", m);
  require("child_process").execFile("sh", ["-c", "exit 5"], (e) => console.log("spawn", e ? e.code : 0));
});
`;
    const r = await sbx.commands.run(`python3 - <<'EOF'\n${py}\nEOF\nnode - <<'EOF'\n${js}\nEOF\n(exit 6); echo "subshell $?"`);
    expect(r.stdout, r.stderr).toBe("thread ok\nfork 7\nposix_spawn 3\nsubprocess 4\nworker 42\nspawn 5\nsubshell 6\n");
  });

  it("a template the operator gave nestedUserNamespaces lets its sandboxes make user namespaces; the rest of the filter stays", async () => {
    const id = `userns-${uniqueTag()}`;
    const put = await fetch(new URL(`/admin/teams/admin/templates/${id}`, e2b().apiUrl), { method: "PUT", headers: { "content-type": "application/json", "x-api-key": e2b().apiKey }, body: JSON.stringify({ spec: { replicas: 0, nestedUserNamespaces: "yes" } }) });
    expect(put.status).toBe(400);
    expect(await put.text()).toContain("nestedUserNamespaces");
    await admin(`/admin/teams/admin/templates/${id}`, { method: "PUT", body: { spec: { replicas: 0, nestedUserNamespaces: true } } });
    try {
      const s = await Sandbox.create(id, e2b());
      try {
        for (const user of ["user", "root"] as const) {
          const r = await s.commands.run("unshare -Urnm sh -c 'id -u; mount -t tmpfs none /mnt && echo nested-ok'", { user });
          expect(r.stdout, user).toBe("0\nnested-ok\n");
          expect((await s.commands.run(probe(), { user })).stdout.trim().split("\n"), user).toEqual(EXPECTED);
        }
        const seccomp = await s.commands.run("grep -h '^Seccomp:' /proc/1/status /proc/self/status", { user: "root" });
        expect(seccomp.stdout).toBe("Seccomp:\t2\nSeccomp:\t2\n");
      } finally {
        await s.kill();
      }
    } finally {
      await admin(`/admin/teams/admin/templates/${id}`, { method: "DELETE" });
    }
  });

  it("what sandboxes do still works: mount -t tmpfs, sudo, python, node, git", async () => {
    const mount = await sbx.commands.run("mount -t tmpfs none /mnt && echo in-tmpfs > /mnt/f && cat /mnt/f && umount /mnt", { user: "root" });
    expect(mount.stdout).toBe("in-tmpfs\n");
    const r = await sbx.commands.run(
      "sudo -n id -u; python3 -c 'print(6*7)'; node -e 'require(\"fs\").readFile(\"/etc/hostname\", (e) => console.log(e ? e.code : \"node ok\"))'; " +
        "cd $(mktemp -d) && git init -q && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && git log --format=%s",
    );
    expect(r.stdout).toBe("0\n42\nnode ok\nx\n");
  });

  it("a template's build steps and its start command run under the same filter", async () => {
    const run = uniqueTag();
    const name = `tpl-seccomp-${run}`;
    const t = Template()
      .fromBaseImage()
      .setEnvs({ RUN_ID: run })
      .runCmd("grep '^Seccomp:' /proc/self/status > /build-seccomp; python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); print(l.syscall(250, 0, 0), ctypes.get_errno())' >> /build-seccomp", { user: "root" })
      .setStartCmd("grep '^Seccomp:' /proc/self/status > /tmp/start-seccomp; sleep infinity", waitForFile("/tmp/start-seccomp"));
    const built = await Template.build(t, name, e2b());
    outputs.push(`b-${built.buildId}`);
    const s = await Sandbox.create(name, e2b());
    try {
      expect((await s.files.read("/build-seccomp")).split(/\s+/).filter(Boolean)).toEqual(["Seccomp:", "2", "-1", "1"]);
      expect((await s.files.read("/tmp/start-seccomp")).split(/\s+/).filter(Boolean)).toEqual(["Seccomp:", "2"]);
    } finally {
      await s.kill();
    }
  });

  it("the code interpreter's kernel and every process of its sandbox run filtered", async () => {
    await seedCodeInterpreter(e2b().apiUrl, e2b().apiKey, 1);
    const ci = await CodeInterpreter.create(e2b());
    try {
      const cell = await ci.runCode("import ctypes, glob\nl = ctypes.CDLL(None, use_errno=True)\nprint(l.syscall(250, 0, 0), ctypes.get_errno())\nprint(sorted({open(f).read().split('Seccomp:')[1].split()[0] for f in glob.glob('/proc/[0-9]*/status')}))");
      expect(cell.error).toBeUndefined();
      expect(cell.logs.stdout.join("")).toBe("-1 1\n['2']\n");
    } finally {
      await ci.kill();
    }
  }, 120_000);
});
