// A terminal's master must reach no other process the runtime starts. node-pty opens it without
// close-on-exec, so before the fix every command and terminal started while it was open held it:
// a command run as `user` could read root's terminal and type into root's shell
// (controllers/runtime/process/terminal-masters.ts).
import type { Sandbox } from "e2b";
import { HostView } from "../../controllers/runtime/host-view.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { streamCall } from "./support/connect-wire.ts";
import { startHarness, type Harness } from "./support/harness.ts";

let h: Harness;
let sbx: Sandbox;
beforeAll(async () => {
  h = await startHarness();
  sbx = await h.create();
  h.runtime.addSandbox("raw", new HostView(), { accessToken: "tok", defaultUser: "user", defaultWorkdir: "/home/user" });
});
afterAll(() => h?.close());

// Every descriptor of the shell that runs it, as `fd <n> -> <target>` lines.
const LIST = 'for f in /proc/$$/fd/*; do echo "fd ${f##*/} -> $(readlink $f)"; done';
const MASTER = /-> \/dev\/(pts\/)?ptmx/;

const decoder = () => {
  const d = new TextDecoder();
  let text = "";
  return { onData: (b: Uint8Array) => void (text += d.decode(b, { stream: true })), text: () => text };
};

/** Kills a terminal and waits for its end, by when its master is closed. */
async function stop(term: Awaited<ReturnType<Sandbox["pty"]["create"]>>): Promise<void> {
  await term.kill();
  await term.wait().catch(() => {});
}

async function terminal(user: "root" | "user") {
  const out = decoder();
  const term = await sbx.pty.create({ cols: 200, rows: 24, user, onData: out.onData });
  return { term, out };
}

/** LIST typed into a new terminal of `user`; its output once the listing is complete. */
async function listedInTerminal(user: "root" | "user"): Promise<string> {
  const { term, out } = await terminal(user);
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode(`${LIST}; echo listed-$((40+2))\n`));
  await expect.poll(() => out.text(), { timeout: 10_000 }).toContain("listed-42");
  await stop(term);
  return out.text();
}

/** What a command and a terminal of `other` list while a terminal of `owner` is open. */
async function listedWhileOpen(owner: "root" | "user", other: "root" | "user"): Promise<{ command: string; terminal: string }> {
  const { term } = await terminal(owner);
  try {
    const command = (await sbx.commands.run(LIST, { user: other })).stdout;
    return { command, terminal: await listedInTerminal(other) };
  } finally {
    await stop(term);
  }
}

describe("a terminal's master", () => {
  it("is held by no command or terminal of `user` started while root's terminal is open", async () => {
    const listed = await listedWhileOpen("root", "user");
    expect(listed.command).toMatch(/^fd 1 -> /m);
    expect(listed.terminal).toMatch(/fd 0 -> \/dev\/pts\/\d+/);
    expect.soft(listed.command).not.toMatch(MASTER);
    expect.soft(listed.terminal).not.toMatch(MASTER);
  });

  it("is held by no command or terminal of root started while a terminal of `user` is open", async () => {
    const listed = await listedWhileOpen("user", "root");
    expect(listed.command).toMatch(/^fd 1 -> /m);
    expect(listed.terminal).toMatch(/fd 0 -> \/dev\/pts\/\d+/);
    expect.soft(listed.command).not.toMatch(MASTER);
    expect.soft(listed.terminal).not.toMatch(MASTER);
  });
});

// A terminal that changes user (`user`, from this root runtime), or is started while another is
// open, goes through the runtime's closer; what its command gets and what the client sees must be
// what a terminal without one gets (root's, with none open).
describe("a terminal through the closer", () => {
  const H = { "e2b-sandbox-id": "raw", "x-access-token": "tok" };
  const AS_ROOT = { ...H, authorization: `Basic ${Buffer.from("root:").toString("base64")}` };
  const script = 'printf "<%s>" "$0" "$@"; printf "\\n[%s][%s][%s][%s]\\n" "$PERL5OPT" "$TERM" "$WEIRD" "$_KRUISE_ENV_0_PATH"; echo "pid $$"; exit 7';
  const start = (cmd: string, args: string[], headers: Record<string, string> = H) =>
    streamCall(h.runtimeUrl, "process.Process/Start", {
      process: { cmd, args, envs: { PERL5OPT: "-Mno::such::module", WEIRD: "a b\n'\"c", LD_PRELOAD: "/no/such/preload.so", _KRUISE_ENV_0_PATH: "mimic" } },
      pty: { size: { cols: 200, rows: 24 } },
    }, headers);
  const answer = (r: Awaited<ReturnType<typeof start>>) => {
    const events = r.envelopes.filter((e) => e.flags === 0).map((e) => e.json.event);
    const pid = events.find((e) => e.start)?.start.pid as number;
    const output = events.filter((e) => e.data?.pty).map((e) => Buffer.from(e.data.pty, "base64").toString()).join("");
    return { pid, output: output.replace(`pid ${pid}`, "pid <its own>"), end: events.find((e) => e.end)?.end };
  };
  const args = ["-c", script, "-x", "a b", "q\"'uote", "new\nline", "--", "-e", ""];

  it("runs the command with its argv, environment, pid and exit status unchanged", async () => {
    const direct = answer(await start("/bin/bash", args, AS_ROOT));
    const alone = answer(await start("/bin/bash", args));
    // The loader's complaint about LD_PRELOAD (bash reads it; the closer's perl must not, which
    // the equalities below check) is the C library's wording: left out of the literal.
    const loader = /^ERROR: ld\.so: object '\/no\/such\/preload\.so'.*\r\n/gm;
    expect(direct.output.match(loader)).toHaveLength(1);
    expect(direct.output.replace(loader, "")).toBe("<-x><a b><q\"'uote><new\r\nline><--><-e><>\r\n[-Mno::such::module][xterm-256color][a b\r\n'\"c][mimic]\r\npid <its own>\r\n");
    expect(direct.end).toMatchObject({ exitCode: 7, exited: true });
    expect(alone.output).toBe(direct.output);
    expect(alone.end).toEqual(direct.end);
    const { term } = await terminal("root");
    try {
      const beside = answer(await start("/bin/bash", args));
      expect(beside.output).toBe(direct.output);
      expect(beside.end).toEqual(direct.end);
      const missing = [answer(await start("/no/such command", ["-x"]))];
      await stop(term);
      missing.push(answer(await start("/no/such command", ["-x"])), answer(await start("/no/such command", ["-x"], AS_ROOT)));
      expect(missing[0]!.output).toContain("execvp(3) failed.: No such file or directory");
      for (const m of missing.slice(1)) {
        expect(m.output).toBe(missing[0]!.output);
        expect(m.end).toEqual(missing[0]!.end);
      }
    } finally {
      await stop(term);
    }
  });

  it("switches a terminal of `user` to the user's groups, not the root runtime's", async () => {
    // The runtime (this process) holds a supplementary group, as root in a pod's image does;
    // a runner that gives it none would hide the leak.
    const before = process.getgroups!();
    process.setgroups!([...before, 4242]);
    try {
      await userTerminalIds();
    } finally {
      process.setgroups!(before);
    }
  });

  async function userTerminalIds() {
    const command = (await sbx.commands.run("id -u; id -G", { user: "user" })).stdout.trim().split("\n");
    expect(command[0]).not.toBe("0");
    expect(command[1]!.split(" ")).not.toContain("0");
    const { term, out } = await terminal("user");
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo "ids $(id -u) / $(id -G) /"; exit\n'));
    await term.wait().catch(() => {});
    // The same user and groups as the command's: before, node-pty kept root's group 0 (setgid and
    // setuid without setgroups).
    expect(out.text()).toContain(`ids ${command[0]} / ${command[1]} /`);
    expect(out.text()).not.toMatch(/ids .*4242/);
  }
});
