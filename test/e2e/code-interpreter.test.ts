// The code interpreter (issue 12.2) through the real @e2b/code-interpreter SDK against the whole
// local system: `Sandbox.create()` gets the SDK's default template (`code-interpreter-v1`, whose
// root filesystem the tier's global setup builds), and runCode reaches port 49999, which the
// agent-runtime serves by driving a Jupyter kernel inside the sandbox.
import { Sandbox, type Context } from "@e2b/code-interpreter";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { seedCodeInterpreter } from "../../scripts/seed.ts";
import { hostileEnv } from "../support/hostile-env.ts";
import { e2b } from "./sdk.ts";

let sbx: Sandbox;

beforeAll(async () => {
  await seedCodeInterpreter(e2b().apiUrl, e2b().apiKey, 1);
  sbx = await Sandbox.create(e2b());
}, 120_000);
afterAll(async () => {
  await sbx?.kill();
});

/** runCode of a Python cell that prints `line`, waits until a file exists that the test writes only
 * once that line reached the SDK (so the line was streamed while the cell ran), then runs `then`. */
async function afterLineArrived(line: string, then: string, context?: Context) {
  const go = `/tmp/go-${Date.now()}`;
  let wrote: Promise<unknown> | undefined;
  const exec = await sbx.runCode(`import os, time\nprint(${JSON.stringify(line)}, flush=True)\nwhile not os.path.exists(${JSON.stringify(go)}): time.sleep(0.05)\n${then}`, {
    ...(context ? { context } : {}),
    // Buffered until the cell's end, the line would never come: the cell would wait until this
    // timeout interrupts it.
    timeoutMs: 60_000,
    onStdout: (m) => {
      if (m.line === `${line}\n`) wrote ??= sbx.files.write(go, "");
    },
  });
  await wrote;
  return exec;
}

describe("runCode (JS code-interpreter SDK)", { timeout: 120_000 }, () => {
  it("hands hostile create-time env vars to a warm member's already started kernel only: no host process acts on them", async () => {
    const hostile = hostileEnv();
    try {
      const claimed = await Sandbox.create({ ...e2b(), envs: hostile.env });
      try {
        const exec = await claimed.runCode("import os; print(os.environ.get('LD_PRELOAD')); print(os.environ.get('BASH_ENV'))");
        expect(hostile.ran()).toEqual([]);
        expect(exec.logs.stdout.join("")).toBe(`${hostile.env.LD_PRELOAD}\n${hostile.env.BASH_ENV}\n`);
      } finally {
        await claimed.kill();
      }
    } finally {
      hostile.dispose();
    }
  });
  it("hands hostile per-execution env vars (LD_PRELOAD, NODE_OPTIONS, BASH_ENV, PERL5OPT, ...) to the kernel only: no host process acts on them", async () => {
    const hostile = hostileEnv();
    try {
      const exec = await sbx.runCode("import os; print(os.environ.get('LD_PRELOAD')); print(os.environ.get('NODE_OPTIONS'))", { envs: hostile.env });
      expect(hostile.ran()).toEqual([]);
      expect(exec.logs.stdout.join("")).toBe(`${hostile.env.LD_PRELOAD}\n${hostile.env.NODE_OPTIONS}\n`);
    } finally {
      hostile.dispose();
    }
  });

  it("keeps state between cells and answers the last expression as the main result", async () => {
    const first = await sbx.runCode("x = 1");
    expect(first.error).toBeUndefined();
    const second = await sbx.runCode("x + 1");
    expect(second.text).toBe("2");
    expect(second.results[0]?.isMainResult).toBe(true);
    expect(second.executionCount).toBeGreaterThan(first.executionCount!);
  });

  it("streams stdout and stderr to the callbacks, in order", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const exec = await sbx.runCode("import sys\nprint('one')\nprint('two', file=sys.stderr)\nprint('three')", {
      onStdout: (m) => void out.push(m.line),
      onStderr: (m) => void err.push(m.line),
    });
    expect(out.join("")).toBe("one\nthree\n");
    expect(err.join("")).toBe("two\n");
    expect(exec.logs.stdout.join("")).toBe("one\nthree\n");
  });

  it("streams a line while its cell still runs: the cell waits for a file the test writes only once the line arrived", async () => {
    const exec = await afterLineArrived("waiting", "print('went')");
    expect(exec.error).toBeUndefined();
    expect(exec.logs.stdout.join("")).toBe("waiting\nwent\n");
  });

  // The JS SDK decodes every chunk it reads on its own (a new TextDecoder each): a character whose
  // bytes two chunks share comes out as U+FFFD. E2B's server writes ASCII-only JSON lines, so that
  // never happens there; ~2 MB of 2-, 3- and 4-byte characters reach the SDK in many chunks.
  it("non-ASCII output and results arrive intact, however the answer is cut into chunks", async () => {
    const exec = await sbx.runCode("s = 'é中😀' * 100000\nprint(s, end='')\ns[:7]");
    expect(exec.error).toBeUndefined();
    const out = exec.logs.stdout.join("");
    expect(out.length).toBe("é中😀".length * 100000);
    expect(out.includes("\ufffd"), "no U+FFFD in the output").toBe(false);
    expect(out).toBe("é中😀".repeat(100000));
    expect(exec.text).toBe("'é中😀é中😀é'");
  });

  it("reports an exception with its name, value and traceback", async () => {
    const exec = await sbx.runCode("def f():\n    raise ValueError('bad value')\nf()");
    expect(exec.error?.name).toBe("ValueError");
    expect(exec.error?.value).toBe("bad value");
    // IPython's traceback, colours and all, as E2B's server sends it.
    expect(exec.error?.traceback).toContain("Traceback (most recent call last)");
    expect(exec.error?.traceback).toContain("bad value");
    // The context is still usable.
    expect((await sbx.runCode("x")).text).toBe("1");
  });

  it("a matplotlib figure comes back as a PNG result; rich results keep their formats", async () => {
    const exec = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()");
    expect(exec.error).toBeUndefined();
    const png = exec.results.find((r) => r.png);
    expect(png).toBeDefined();
    expect(Buffer.from(png!.png!, "base64").subarray(1, 4).toString()).toBe("PNG");
    const html = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2]})");
    expect(html.results[0]?.html).toContain("<table");
    expect(html.results[0]?.text).toContain("a");
  });

  it("contexts have their own variables and cwd; restart forgets, remove ends one", async () => {
    const ctx = await sbx.createCodeContext({ cwd: "/tmp" });
    expect(ctx).toMatchObject({ language: "python", cwd: "/tmp" });
    expect((await sbx.runCode("import os; os.getcwd()", { context: ctx })).text).toBe("'/tmp'");
    const missing = await sbx.runCode("x", { context: ctx });
    expect(missing.error?.name).toBe("NameError");
    await sbx.runCode("y = 5", { context: ctx });
    expect((await sbx.runCode("y", { context: ctx })).text).toBe("5");
    expect((await sbx.runCode("'y' in globals()")).text).toBe("False");
    expect((await sbx.listCodeContexts()).map((c) => c.id)).toContain(ctx.id);
    await sbx.restartCodeContext(ctx);
    expect((await sbx.runCode("y", { context: ctx })).error?.name).toBe("NameError");
    await sbx.removeCodeContext(ctx);
    expect((await sbx.listCodeContexts()).map((c) => c.id)).not.toContain(ctx.id);
    await expect(sbx.runCode("1", { context: ctx })).rejects.toThrow(/not found/);
  });

  it("env vars apply to one execution only", async () => {
    const exec = await sbx.runCode("import os; os.environ.get('GREETING')", { envs: { GREETING: "hi there" } });
    expect(exec.text).toBe("'hi there'");
    expect((await sbx.runCode("import os; os.environ.get('GREETING')")).text).toBeUndefined();
  });

  // The driver runs one cell at a time, so the kernel must not drop what comes after an error: with
  // Jupyter's default stop_on_error, ipykernel aborts every execute request that arrives before its
  // loop turns, which took the erroring cell's env restore (its env leaked into later cells: 48 of
  // 60 concurrent pairs on a loaded machine) and, in a CI run, the cell after an interrupted one (an
  // empty result). The cell holds the kernel's loop a moment after it ends, as a loaded machine
  // does, so the requests behind it come in that window every time.
  it("a cell that raises: its per-execution env ends with it, and the cell queued behind it runs", async () => {
    await sbx.runCode("x = 1");
    for (let i = 0; i < 3; i++) {
      const [failed, next] = await Promise.all([
        sbx.runCode("import asyncio, time\nasyncio.get_event_loop().call_soon(time.sleep, 0.3)\nraise ValueError('boom')", { envs: { ONLY_THEN: "yes" } }),
        sbx.runCode("import os; (x + 41, os.environ.get('ONLY_THEN'))"),
      ]);
      expect(failed.error?.name).toBe("ValueError");
      expect(next.text).toBe("(42, None)");
    }
  });

  it("a timeout interrupts a busy cell and the context stays usable", async () => {
    await expect(sbx.runCode("import time\nwhile True: time.sleep(0.1)", { timeoutMs: 2_000 })).rejects.toThrow();
    expect((await sbx.runCode("x + 41")).text).toBe("42");
  });

  // E2B's server answers a cell whose kernel restarts under it with ContextRestarting ("Context
  // was restarted", e2b-dev/code-interpreter template/server/messaging.py); its next cell runs on
  // the restarted kernel.
  it("a kernel that exits mid-cell: that cell ends with a clear error after its output so far; the context's next cell runs on a new kernel", async () => {
    const ctx = await sbx.createCodeContext();
    await sbx.runCode("kept = 41", { context: ctx });
    // The exit waits until the line before it reached the SDK: a kernel's queued output dies with
    // it, as it would anywhere.
    const dead = await afterLineArrived("before the exit", "os._exit(1)", ctx);
    expect(dead.logs.stdout.join("")).toBe("before the exit\n");
    expect(dead.error).toMatchObject({ name: "ContextRestarting", value: "Context was restarted" });
    const after = await sbx.runCode("kept", { context: ctx });
    expect(after.error?.name).toBe("NameError");
    expect((await sbx.runCode("kept = 1; kept + 1", { context: ctx })).text).toBe("2");
    // The default context's kernel is another process: untouched.
    expect((await sbx.runCode("2 * 21")).text).toBe("42");
    // The same for a JavaScript kernel.
    const js = await sbx.createCodeContext({ language: "js" });
    await sbx.runCode("globalThis.keptJs = 41", { context: js });
    expect((await sbx.runCode("process.exit(1)", { context: js })).error).toMatchObject({ name: "ContextRestarting", value: "Context was restarted" });
    expect((await sbx.runCode("typeof keptJs", { context: js })).text).toBe("undefined");
    expect((await sbx.runCode("1 + 1", { context: js })).text).toBe("2");
  });
  it("a Freeze pause and resume keep the kernel's state", async () => {
    await sbx.runCode("kept = 'across pause'");
    expect(await sbx.pause()).toBe(true);
    const resumed = await Sandbox.connect(sbx.sandboxId, e2b());
    expect((await resumed.runCode("kept")).text).toBe("'across pause'");
  });

  it("JavaScript: top-level const/let/functions and awaited values persist; the last value is the result", async () => {
    const first = await sbx.runCode("const base = 40;\nfunction inc(n) { return n + 1 }\nlet got = await Promise.resolve(1)", { language: "js" });
    expect(first.error).toBeUndefined();
    const second = await sbx.runCode("inc(base) + got", { language: "javascript" });
    expect(second.text).toBe("42");
    expect(second.results[0]?.isMainResult).toBe(true);
    expect(second.executionCount).toBeGreaterThan(first.executionCount!);
    // Its own state: Python's context does not see it.
    expect((await sbx.runCode("'base' in globals()")).text).toBe("False");
  });

  it("JavaScript: console.log and console.error stream to the callbacks", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const exec = await sbx.runCode("console.log('one'); console.error('two'); console.log('three', 3)", {
      language: "js",
      onStdout: (m) => void out.push(m.line),
      onStderr: (m) => void err.push(m.line),
    });
    expect(out.join("")).toBe("one\nthree 3\n");
    expect(err.join("")).toBe("two\n");
    expect(exec.results).toEqual([]);
  });

  it("JavaScript: an error has its name, message and stack; the context lives on", async () => {
    const exec = await sbx.runCode("function f() { throw new TypeError('bad value') }\nf()", { language: "js" });
    expect(exec.error?.name).toBe("TypeError");
    expect(exec.error?.value).toBe("bad value");
    expect(exec.error?.traceback).toContain("at f (");
    const rejected = await sbx.runCode("await Promise.reject(new RangeError('later'))", { language: "js" });
    expect(rejected.error?.name).toBe("RangeError");
    expect((await sbx.runCode("base + 2", { language: "js" })).text).toBe("42");
  });

  it("JavaScript: a context runs as the sandbox user in its cwd; env vars for one cell; restart forgets", async () => {
    // E2B's server names the language "javascript", whichever alias created the context.
    const ctx = await sbx.createCodeContext({ language: "js", cwd: "/tmp" });
    expect(ctx).toMatchObject({ language: "javascript", cwd: "/tmp" });
    expect((await sbx.runCode("process.cwd() + ' ' + require('os').userInfo().username", { context: ctx })).text).toBe("/tmp user");
    expect((await sbx.runCode("process.env.GREETING", { context: ctx, envs: { GREETING: "hi" } })).text).toBe("hi");
    expect((await sbx.runCode("process.env.GREETING", { context: ctx })).text).toBeUndefined();
    await sbx.runCode("const y = 5", { context: ctx });
    await sbx.restartCodeContext(ctx);
    expect((await sbx.runCode("y", { context: ctx })).error?.name).toBe("ReferenceError");
    await sbx.removeCodeContext(ctx);
  });

  it("JavaScript: a timeout interrupts a busy loop and the context keeps its state", async () => {
    await expect(sbx.runCode("while (true) {}", { language: "js", timeoutMs: 2_000 })).rejects.toThrow();
    expect((await sbx.runCode("base", { language: "js" })).text).toBe("40");
  });

  it("bash: cwd, variables and functions persist between cells; stdout/stderr stream; a failing status is the error", async () => {
    expect((await sbx.runCode("cd /tmp; X=5; f() { echo \"f$1\"; }", { language: "bash" })).error).toBeUndefined();
    const out: string[] = [];
    const err: string[] = [];
    const exec = await sbx.runCode("pwd; echo $X; f 7; echo oops >&2; whoami", {
      language: "bash",
      onStdout: (m) => void out.push(m.line),
      onStderr: (m) => void err.push(m.line),
    });
    expect(out.join("")).toBe("/tmp\n5\nf7\nuser\n");
    expect(err.join("")).toBe("oops\n");
    expect(exec.error).toBeUndefined();
    expect((await sbx.runCode("ls /nonexistent-dir", { language: "bash" })).error?.value).toBe("exit status 2");
    expect((await sbx.runCode("echo $X", { language: "bash" })).logs.stdout.join("")).toBe("5\n");
  });

  it("an unknown language is a 400 (the JS SDK shows the status; the body says which are available)", async () => {
    await expect(sbx.runCode("1", { language: "cobol" })).rejects.toThrow(/400 Bad Request/);
  });
  it("port 49999 runs a cell only with the sandbox's access token: a raw /execute without it, or with a wrong one, is envd's 401 (review24 edge F1)", async () => {
    const execute = (headers: Record<string, string>) =>
      fetch(new URL("/execute", e2b().apiUrl), {
        method: "POST",
        headers: { "content-type": "application/json", "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "49999", ...headers },
        body: JSON.stringify({ code: "touch /tmp/ran-without-token", language: "bash" }),
      });
    for (const headers of [{}, { "x-access-token": "wrong" }] as Record<string, string>[]) {
      const res = await execute(headers);
      expect({ status: res.status, body: await res.json() }).toEqual({ status: 401, body: { code: 401, message: expect.stringMatching(/^unauthorized access/) } });
    }
    expect((await sbx.runCode("import os; os.path.exists('/tmp/ran-without-token')")).text).toBe("False");
    // The SDK's context calls send no token, and still work.
    const ctx = await sbx.createCodeContext();
    expect((await sbx.listCodeContexts()).map((c) => c.id)).toContain(ctx.id);
    await sbx.removeCodeContext(ctx);
  });
});
