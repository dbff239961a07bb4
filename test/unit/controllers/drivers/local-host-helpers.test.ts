// The local driver's perl helpers without root: both compile, the relay's parsers take exactly
// the lines they should, syscall numbers come from one table per architecture, and a command's
// environment reaches it through the handover file, never through the helper's own environment;
// enter.pl reports its command's pid once it runs, and the command holds nothing of that report.
import { spawn, spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { helperEnv, PERL, syscallNumbers } from "../../../../controllers/drivers/local/host-helpers.ts";
import { ENTER_SCRIPT } from "../../../../controllers/drivers/local/local-view.ts";
import { ALLOW_SETUID_SCRIPT, USERNS_SCRIPT } from "../../../../controllers/drivers/local/userns.ts";
import { parseReport } from "../../../../controllers/drivers/local/spawner-sandbox-pid.ts";
import { encodeEnv, handOver, SANDBOX_ENV_FILE } from "../../../../controllers/runtime/process/launcher.ts";
import { HOST_LOADER_SAW_IT, hostileEnv, parseEnv0 } from "../../../support/hostile-env.ts";
import { waitFor } from "../../../support/wait-for.ts";

const RELAY_SCRIPT = fileURLToPath(new URL("../../../../controllers/drivers/local/port-relay.pl", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "helpers-unit-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `code` in perl with `script` loaded (its main not run); each input line is one case. */
function perlWith(script: string, code: string, lines: string[]): string[] {
  const r = spawnSync(PERL, ["-e", `require $ARGV[0]; while (my $l = <STDIN>) { chomp $l; $l =~ s/\\\\n/\\n/g; ${code}; print "\\n"; }`, script], {
    input: lines.map((l) => `${l}\n`).join(""),
    env: helperEnv(),
    encoding: "utf8",
  });
  expect(r.stderr).toBe("");
  return r.stdout.split("\n").slice(0, -1);
}

describe("helper scripts", () => {
  for (const script of [ENTER_SCRIPT, RELAY_SCRIPT, USERNS_SCRIPT, ALLOW_SETUID_SCRIPT]) {
    it(`${script.split("/").pop()} compiles (perl -c)`, () => {
      const r = spawnSync(PERL, ["-c", script], { env: helperEnv(), encoding: "utf8" });
      expect(r.stderr).toContain("syntax OK");
      expect(r.status).toBe(0);
    });
  }
});

describe("port relay's parsers", () => {
  const request = (lines: string[]) =>
    perlWith(RELAY_SCRIPT, `my $r = parse_request($l); print !defined $r ? 'more' : $r->{error} ? "error: $r->{error}" : "ns $r->{nspid} start $r->{start} port $r->{port} rest [$r->{rest}]"`, lines);

  it("an inbound request line: pid, start time and port, then the user's bytes", () => {
    expect(request(["123 456 8000\\nGET / HTTP/1.1", "1 2 65535\\n", "1 2 1\\n"])).toEqual(["ns 123 start 456 port 8000 rest [GET / HTTP/1.1]", "ns 1 start 2 port 65535 rest []", "ns 1 start 2 port 1 rest []"]);
  });

  it("waits for the rest of a line, refuses one that is too long, malformed, or a port out of range", () => {
    expect(request(["123 456", "", `${"1".repeat(65)}`, `${"1".repeat(60)} 1 80\\n`, "1 2 0\\n", "1 2 65536\\n", "-1 2 80\\n", "1 2 80 \\n", "1  2 80\\n", "a b c\\n", "1 2 80;rm\\n"])).toEqual([
      "more",
      "more",
      "error: request line too long",
      "error: request line too long",
      "error: bad port 0",
      "error: bad port 65536",
      "error: bad request line",
      "error: bad request line",
      "error: bad request line",
      "error: bad request line",
      "error: bad request line",
    ]);
  });

  const command = (lines: string[]) =>
    perlWith(RELAY_SCRIPT, `my ($c, $why) = parse_command($l); print $why ? "error: $why" : join(' ', map { ref $_ ? '[' . join(',', @$_) . ']' : $_ } @$c)`, lines);

  it("the agent's commands, with their arguments", () => {
    expect(
      command([
        "close sbx-1_a",
        "unveth kr4242",
        "veth 12 34 kr12 02:00:0a:58:00:05 1500 7 10.88.0.5/16 10.88.0.1",
        "listen sbx1 12 34 3128 40 /sys/fs/cgroup/pids/k/sbx1/cgroup.procs /sys/fs/cgroup/memory/k/sbx1/cgroup.procs",
        "listen sbx1 12 34 3128 40",
        "listen sbx1 12 34 3128 40 fast /sys/fs/cgroup/pids/k/sbx1/cgroup.procs",
        "listen sbx1 12 34 3128 40 fast",
        "listen sbx1 12 34 3128 40 fast at 10.88.0.5 /sys/fs/cgroup/pids/k/sbx1/cgroup.procs",
      ]),
    ).toEqual([
      "close sbx-1_a",
      "unveth kr4242",
      "veth 12 34 kr12 02:00:0a:58:00:05 1500 7 10.88.0.5 16 10.88.0.1",
      "listen sbx1 12 34 3128 40 0 [/sys/fs/cgroup/pids/k/sbx1/cgroup.procs,/sys/fs/cgroup/memory/k/sbx1/cgroup.procs]",
      "listen sbx1 12 34 3128 40 0 []",
      "listen sbx1 12 34 3128 40 1 [/sys/fs/cgroup/pids/k/sbx1/cgroup.procs]",
      "listen sbx1 12 34 3128 40 1 []",
      "listen sbx1 12 34 3128 40 1 [/sys/fs/cgroup/pids/k/sbx1/cgroup.procs] 10.88.0.5",
    ]);
  });

  it("`tables` (a veth's bridge table again): a host end, a MAC and an IPv4 address, or refused", () => {
    expect(
      command([
        "tables kr12 02:6b:0a:58:00:05 10.88.0.5",
        "tables kr12 02:6b:0a:58:00:05 10.88.0.256",
        "tables eth0 02:6b:0a:58:00:05 10.88.0.5",
        "tables kr12 02:6b:0a:58:00 10.88.0.5",
        "tables kr12 02:6b:0a:58:00:05 10.88.0.5; flush ruleset",
      ]),
    ).toEqual(["tables kr12 02:6b:0a:58:00:05 10.88.0.5", "error: bad address", "error: bad command", "error: bad command", "error: bad command"]);
  });

  it("the fast path's conntrack generations: only the mask's bits are compared and set, never 0, within the mask as they wrap; a mask is one run of at least 4 bits", () => {
    const masks = perlWith(RELAY_SCRIPT, `my $v = parse_mask($l); print defined $v ? hex32($v) : 'bad'`, ["0xfff00000", "0x0000f000", "0xffffffff", "0x00000007", "0x0ff0f000", "0x00000000", "fff00000", "0xFFF00000"]);
    expect(masks).toEqual(["0xfff00000", "0x0000f000", "0xffffffff", "bad", "bad", "bad", "bad", "bad"]);
    // 40 generations under a 4-bit mask: each in 0x1000..0xf000, wrapping past 15 without 0.
    const gens = perlWith(RELAY_SCRIPT, `ct_mask_set(0x0000f000); print join(' ', map { hex32(gen_next()) } 1 .. $l)`, ["40"])[0]!.split(" ").map(Number);
    expect(gens).toHaveLength(40);
    expect(gens.every((g) => g >= 0x1000 && g <= 0xf000 && (g & ~0xf000) === 0)).toBe(true);
    expect(new Set(gens).size).toBe(15);
    const rules = perlWith(RELAY_SCRIPT, `ct_mask_set(0xfff00000); print guard_rules("10.88.0.5", $l)`, [String(0x00300000)]).join("\n");
    expect(rules).toContain("ct state established,related ct mark and 0xfff00000 == 0x00300000 accept");
    expect(rules).toContain("ct mark set ct mark and 0x000fffff or 0x00300000 accept");
    expect(rules).not.toMatch(/ct mark (set )?0x/);
  });

  it("the fast path's set changes are rate limited: a burst of 16 per sandbox, then 4 a second; 64 and 32 a second for all", () => {
    // Each line: "<tag> <now>", answered with whether a run may start (the clock is the caller's).
    const budget = (lines: string[]) => perlWith(RELAY_SCRIPT, `my ($t, $now) = split / /, $l; print fast_budget($t, $now) ? 1 : 0`, lines).join("");
    // One sandbox at one instant: 16, then none; a second later 4 more.
    expect(budget([...Array(20).fill("a 100"), ...Array(5).fill("a 101")])).toBe("1".repeat(16) + "0000" + "11110");
    // Another sandbox has its own burst, until the relay's 64 are spent (by 4 sandboxes at once).
    expect(budget(["a", "b", "c", "d", "e"].flatMap((t) => Array(16).fill(`${t} 100`)))).toBe("1".repeat(64) + "0".repeat(16));
    // Refills stop at the burst: a long quiet gives 16, not more.
    expect(budget([...Array(16).fill("a 100"), ...Array(17).fill("a 1000")])).toBe("1".repeat(16) + "1".repeat(16) + "0");
  });

  it("a sandbox's rate of set changes is forgotten with its listener: after `close`, a listen starts with a full burst (the relay keeps no state per sandbox it ever saw)", () => {
    // "close <tag>" lines close the tag's listener (none here: only its state goes).
    const run = (lines: string[]) => perlWith(RELAY_SCRIPT, `my ($t, $now) = split / /, $l; if ($t eq 'close') { close_egress($now); print 'c' } else { print fast_budget($t, $now) ? 1 : 0 }`, lines).join("");
    expect(run([...Array(17).fill("a 100"), "close a", ...Array(16).fill("a 100")])).toBe("1".repeat(16) + "0c" + "1".repeat(16));
  });

  it("the fast-path commands: an IPv4 address, a port and a timeout within bounds, or refused", () => {
    expect(
      command([
        "fast sbx1 198.51.100.2 80 300",
        "unfast sbx1 1",
        "unfast sbx1 0",
        "fast sbx1 198.51.100.256 80 300",
        "fast sbx1 198.51.100.2 0 300",
        "fast sbx1 198.51.100.2 80 0",
        "fast sbx1 198.51.100.2 80 3601",
        "fast sbx1 ::1 80 300",
        "fast sbx1 198.51.100.2 80 30; flush ruleset",
        "fast sbx1 198.51.100.2 . tcp . 22 80 30",
        "unfast sbx1 2",
        "unfast ../x 1",
      ]),
    ).toEqual([
      "fast sbx1 198.51.100.2 80 300",
      "unfast sbx1 1",
      "unfast sbx1 0",
      "error: bad address",
      "error: bad port 0",
      "error: bad timeout 0",
      "error: bad timeout 3601",
      "error: bad command",
      "error: bad command",
      "error: bad command",
      "error: bad command",
      "error: bad command",
    ]);
  });

  it("anything else is refused: unknown verbs, odd names, bad ports, paths that are not cgroup.procs", () => {
    expect(
      command([
        "",
        "open sbx1",
        "close ",
        "close a b",
        `close ${"a".repeat(65)}`,
        "close ../x",
        "unveth eth0",
        "unveth kr1; reboot",
        "veth 12 34 eth0 02:00:0a:58:00:05 1500 7 10.88.0.5/16 10.88.0.1",
        "veth 12 34 kr12 02:00:0a:58:00:05 1500 7 10.88.0.5 10.88.0.1",
        "listen sbx1 12 34 0 40",
        "listen sbx1 12 34 70000 40",
        "listen sbx1 12 34 3128 40 /etc/passwd",
        "listen sbx1 12 34 3128 40  /a/cgroup.procs",
        "listen sbx1 12 34 3128 40 fast at 10.88.0.256",
        "listen sbx1 12 34 3128 40 fast at 10.88.0.5/16",
      ]),
    ).toEqual([
      "error: bad command",
      "error: bad command",
      "error: bad command",
      "error: bad command",
      "error: bad command",
      "error: bad command",
      "error: bad command",
      "error: bad command",
      "error: bad command",
      "error: bad command",
      "error: bad port 0",
      "error: bad port 70000",
      "error: bad command",
      "error: bad command",
      "error: bad address",
      "error: bad command",
    ]);
  });
});

describe("enter.pl's environment file", () => {
  const parse = (lines: string[]) =>
    perlWith(ENTER_SCRIPT, `$l =~ s/\\\\0/\\0/g; my ($e, $why) = parse_env($l); print $why ? "error: $why" : join(';', map { (my $v = $e->{$_}) =~ s/\\n/<NL>/g; "$_=$v" } sort keys %$e)`, lines);

  it("NAME=value entries, values may hold '=' and newlines", () => {
    expect(parse(["A=1\\0B=x=y\\0", "C=line1\\nline2\\0", "", "D=\\0"])).toEqual(["A=1;B=x=y", "C=line1<NL>line2", "", "D="]);
  });

  it("an entry without a name or '=' is refused", () => {
    expect(parse(["=x\\0", "NOEQUALS\\0"])).toEqual(["error: bad entry in the environment file", "error: bad entry in the environment file"]);
  });
});

describe("syscall numbers", () => {
  it("one table per architecture; any other is refused by name", () => {
    expect(syscallNumbers("x64")).toEqual({ setns: 308, prctl: 157, unshare: 272, mount: 165, openTree: 428, mountSetattr: 442, moveMount: 429, splice: 275, clone3: 435, umount2: 166 });
    expect(syscallNumbers("arm64")).toEqual({ setns: 268, prctl: 167, unshare: 97, mount: 40, openTree: 428, mountSetattr: 442, moveMount: 429, splice: 76, clone3: 435, umount2: 39 });
    expect(() => syscallNumbers("riscv64")).toThrow(/no syscall numbers for riscv64 \(supported: x64, arm64\)/);
  });
});

describe("environment handover", () => {
  it("writes the environment to a new 0600 file and puts its path where the command asks", () => {
    const h = handOver({ file: "/x", args: ["a", SANDBOX_ENV_FILE, "b"], cwd: "/", env: {}, sandboxEnv: { A: "1", B: "x=y" } }, () => dir);
    const path = h.args[1]!;
    expect(path.startsWith(`${dir}/`)).toBe(true);
    expect([h.args[0], h.args[2]]).toEqual(["a", "b"]);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readFileSync(path, "utf8")).toBe("A=1\0B=x=y\0");
    h.release();
    expect(existsSync(path)).toBe(false);
  });

  it("refuses names and values execve could not carry", () => {
    expect(() => encodeEnv({ "A=B": "c" })).toThrow(/invalid environment variable name/);
    expect(() => encodeEnv({ "": "c" })).toThrow(/invalid environment variable name/);
    expect(() => encodeEnv({ A: "b\0c" })).toThrow(/NUL/);
  });

  it("enter.pl (no sandbox, own user) gives the command the file's environment, keeps none of it itself, and unlinks the file", () => {
    const hostile = hostileEnv();
    try {
      const { setns, prctl } = syscallNumbers();
      const uid = String(process.getuid!());
      const gid = String(process.getgid!());
      const host = {
        file: PERL,
        args: [ENTER_SCRIPT, SANDBOX_ENV_FILE, "0", uid, gid, "/", "-", String(setns), String(prctl), "-", "-", "--", "/usr/bin/env", "-0"],
        cwd: "/",
        env: helperEnv(),
        sandboxEnv: { PATH: "/usr/bin:/bin", ...hostile.env },
      };
      const h = handOver(host, () => dir);
      const r = spawnSync(host.file, h.args, { env: host.env, encoding: "utf8" });
      expect(hostile.ran()).toEqual([]);
      // Without a sandbox the command itself runs on the host and tries the preload once; the
      // helper (perl) would have been a second try.
      expect(r.stderr.split(HOST_LOADER_SAW_IT).length - 1).toBe(1);
      expect(r.status).toBe(0);
      expect(parseEnv0(r.stdout)).toEqual(host.sandboxEnv);
      expect(existsSync(h.args[1]!)).toBe(false);
    } finally {
      hostile.dispose();
    }
  });
});

// enter.pl writes the pid its command has (in the sandbox's pid namespace; here, with no sandbox,
// the host's) to the file KRUISE_PID_FILE names, once the command has replaced its child and before
// it reaps it. The command must hold neither that file nor the pipe enter.pl learns the pid and the
// exec from: either would let tenant code write a pid of its choosing into the report.
describe("enter.pl's pid report", () => {
  const { setns, prctl } = syscallNumbers();
  const entered = (cmd: string[]) => ({
    file: PERL,
    args: [ENTER_SCRIPT, SANDBOX_ENV_FILE, "0", String(process.getuid!()), String(process.getgid!()), "/", "-", String(setns), String(prctl), "-", "-", "--", ...cmd],
    cwd: "/",
    env: helperEnv(),
    sandboxEnv: { PATH: "/usr/bin:/bin" },
  });
  let n = 0;
  /** Starts `cmd` through enter.pl, reporting to a new file. */
  function start(cmd: string[], pidFile = join(dir, `pid-${++n}`), inherited?: number) {
    const h = handOver(entered(cmd), () => dir);
    const extra = inherited === undefined ? [] : [...Array<"ignore">(27).fill("ignore"), inherited];
    const child = spawn(PERL, h.args, { env: helperEnv({ KRUISE_PID_FILE: pidFile }), stdio: ["pipe", "pipe", "pipe", ...extra] });
    const seen = { exited: false, out: "", err: "" };
    child.stdout!.on("data", (d) => (seen.out += String(d)));
    child.stderr!.on("data", (d) => (seen.err += String(d)));
    const exit = new Promise<number | null>((r) => child.once("exit", (code) => ((seen.exited = true), r(code))));
    const report = () => (existsSync(pidFile) ? readFileSync(pidFile, "utf8") : undefined);
    return { child, seen, exit, report, pidFile };
  }
  it("reports the command's pid while it runs; the command holds its stdio only: not the report file, enter.pl's pipe or what enter.pl inherited", async () => {
    // A descriptor enter.pl inherits without close-on-exec, as from a spawner holding another
    // sandbox's terminal master (and whatever the test runner itself passes on).
    const leaked = openSync(join(dir, "leaked"), "w");
    const { child, seen, exit, report } = start(["/bin/sh", "-c", "echo $$; ls /proc/$$/fd; echo end; read x; true"], undefined, leaked);
    closeSync(leaked);
    try {
      // The shell prints its pid and its descriptors, then waits on stdin: it is running the command.
      const out = await waitFor(() => seen.out.endsWith("end\n") && seen.out, { what: "the shell's descriptors" });
      const [pid, ...fds] = out.trim().split("\n").slice(0, -1);
      expect(fds).toEqual(["0", "1", "2"]);
      expect(await waitFor(() => report() || undefined, { what: "the report" })).toBe(`${pid}\n`);
      expect(seen.exited).toBe(false);
    } finally {
      child.stdin!.end();
    }
    expect(await exit).toBe(0);
    expect(seen.err).toBe("");
  });

  it("a command that is done at once still has its pid reported, before enter.pl exits", async () => {
    for (let i = 0; i < 5; i++) {
      const { exit, report, seen } = start(["/bin/sh", "-c", "echo $$"]);
      expect(await exit).toBe(0);
      expect(report()).toBe(seen.out);
    }
  });

  it("'-' names no file: nothing is reported and the command runs as before", async () => {
    const { exit, seen } = start(["/bin/echo", "hi"], "-");
    expect(await exit).toBe(0);
    expect(seen.out).toBe("hi\n");
    expect(existsSync("-")).toBe(false);
  });

  it("the agent takes a pid and a newline, nothing else", () => {
    expect(parseReport("123\n")).toBe(123);
    expect(parseReport("4194304\n")).toBe(4194304);
    for (const bad of [undefined, "", "123", "0\n", "012\n", "12 3\n", "123\n\n", "4194305\n", "99999999\n", "-1\n", "1e3\n"]) expect({ bad, pid: parseReport(bad) }).toEqual({ bad, pid: undefined });
  });
});
