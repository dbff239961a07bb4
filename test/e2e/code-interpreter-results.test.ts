// The code interpreter's richer results and lifecycle through the real @e2b/code-interpreter SDK
// against the whole local system: TypeScript cells (transpiled inside the sandbox), JS rich results,
// E2B's `chart` objects from matplotlib figures, R cells (IRkernel), contexts across a Stop pause,
// and port 49999 of a sandbox whose template has no interpreter (a user port like any other).
import { Sandbox } from "@e2b/code-interpreter";
import { Sandbox as BaseSandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { seedCodeInterpreter } from "../../scripts/seed.ts";
import { hostileEnv } from "../support/hostile-env.ts";
import { e2b, sleep } from "./sdk.ts";

let sbx: Sandbox;

beforeAll(async () => {
  await seedCodeInterpreter(e2b().apiUrl, e2b().apiKey, 1);
  sbx = await Sandbox.create(e2b());
}, 120_000);
afterAll(async () => {
  await sbx?.kill();
});

type Chart = { type: string; title: string | null; elements: Record<string, unknown>[]; [k: string]: unknown };
const chartOf = async (code: string) => {
  const exec = await sbx.runCode(`import matplotlib.pyplot as plt\n${code}\nplt.show()`);
  expect(exec.error).toBeUndefined();
  const r = exec.results.find((x) => x.chart);
  expect(r?.png).toBeTruthy(); // the picture still travels beside the chart
  return r!.chart as unknown as Chart;
};

describe("code interpreter results (JS code-interpreter SDK)", { timeout: 120_000 }, () => {
  it("TypeScript cells: types are stripped inside the sandbox; state persists; a context reads 'typescript'", async () => {
    const exec = await sbx.runCode("function subtract(x: number, y: number): number {\n  return x - y;\n}\n\nsubtract(1, 2)", { language: "ts" });
    expect(exec.error).toBeUndefined();
    expect(exec.results[0]?.text).toBe("-1");
    await sbx.runCode("interface P { x: number }\nconst p: P = { x: 40 };\nenum E { A, B, C }", { language: "typescript" });
    expect((await sbx.runCode("p.x + (E.C as number)", { language: "ts" })).text).toBe("42");
    const ctx = await sbx.createCodeContext({ language: "typescript", cwd: "/tmp" });
    expect(ctx).toMatchObject({ language: "typescript", cwd: "/tmp" });
    expect((await sbx.runCode("const here: string = process.cwd(); here", { context: ctx })).text).toBe("/tmp");
    const bad = await sbx.runCode("let broken: = 1", { context: ctx });
    expect(bad.error?.name).toBe("SyntaxError");
  });

  it("JavaScript rich results: a string is its text, objects and arrays come with json, Jupyter.display gives html", async () => {
    expect((await sbx.runCode("'Hello, World!'", { language: "js" })).text).toBe("Hello, World!");
    const obj = await sbx.runCode("({ a: 1, b: [1, 'x'] })", { language: "js" });
    expect(obj.results[0]?.json).toEqual({ a: 1, b: [1, "x"] });
    expect(obj.text).toBe("{ a: 1, b: [ 1, 'x' ] }");
    expect((await sbx.runCode("[1, 2, 3]", { language: "js" })).results[0]?.json).toEqual([1, 2, 3]);
    const html = await sbx.runCode("({ [Symbol.for('Jupyter.display')]() { return { 'text/html': '<b>bold</b>', 'text/plain': 'bold' } } })", { language: "js" });
    expect(html.results[0]).toMatchObject({ html: "<b>bold</b>", text: "bold" });
  });

  it("a matplotlib line chart comes back as E2B's chart object", async () => {
    const c = await chartOf("plt.plot([1, 2, 3], [1, 4, 9], label='squares')\nplt.plot([1, 2, 3], [2, 3, 4])\nplt.title('Growth')\nplt.xlabel('Time (s)')\nplt.ylabel('Size [m]')");
    expect(c).toMatchObject({ type: "line", title: "Growth", x_label: "Time (s)", y_label: "Size [m]", x_unit: "s", y_unit: "m", x_scale: "linear", y_scale: "linear" });
    expect(c.elements).toEqual([
      { label: "squares", points: [[1, 1], [2, 4], [3, 9]] },
      { label: "Line 1", points: [[1, 2], [2, 3], [3, 4]] },
    ]);
    expect((c.x_ticks as number[]).length).toBe((c.x_tick_labels as string[]).length);
  });

  it("bar, scatter and pie charts; several axes are a superchart", async () => {
    const bar = await chartOf("plt.bar(['Author A', 'Author B', 'Author C'], [100, 200, 300], label='Books Sold')\nplt.title('Book Sales')");
    expect(bar).toMatchObject({ type: "bar", title: "Book Sales" });
    expect(bar.elements).toEqual(["Author A", "Author B", "Author C"].map((label, i) => ({ label, group: "Books Sold", value: 100 * (i + 1) })));
    const scatter = await chartOf("plt.scatter([1, 2, 3], [3, 2, 1], label='pts')");
    expect(scatter).toMatchObject({ type: "scatter", elements: [{ label: "pts", points: [[1, 3], [2, 2], [3, 1]] }] });
    const pie = await chartOf("plt.pie([90, 10], labels=['No', 'No, in blue'], startangle=90)\nplt.title('Wake up early?')");
    expect(pie).toMatchObject({ type: "pie", title: "Wake up early?", elements: [{ label: "No", angle: 324, radius: 1 }, { label: "No, in blue", angle: 36, radius: 1 }] });
    const sup = await chartOf("fig, (a, b) = plt.subplots(1, 2)\na.plot([1, 2], [3, 4])\nb.bar(['x', 'y'], [1, 2])\nfig.suptitle('Both')");
    expect(sup).toMatchObject({ type: "superchart", title: "Both" });
    expect(sup.elements.map((e) => e.type)).toEqual(["line", "bar"]);
  });

  it("R cells (IRkernel): values, state, output, per-cell env, and R's own errors", async () => {
    // IRkernel sends a cell's value as a Jupyter display (display_data), not an execute_result:
    // a result, not the main one, so `execution.text` stays empty.
    const two = await sbx.runCode("1+1", { language: "r" });
    expect(two.error).toBeUndefined();
    expect(two.results[0]).toMatchObject({ text: "[1] 2", isMainResult: false });
    await sbx.runCode("x <- c(1, 2, 3)", { language: "r" });
    const out = await sbx.runCode("cat(sum(x), '\\n'); mean(x)", { language: "r" });
    expect(out.logs.stdout.join("")).toBe("6 \n");
    expect(out.results[0]?.text).toBe("[1] 2");
    const env = await sbx.runCode("Sys.getenv('ONLY_HERE')", { language: "r", envs: { ONLY_HERE: "it's \"r\"" } });
    expect(env.results[0]?.text).toBe(`[1] "it's \\"r\\""`);
    expect((await sbx.runCode("Sys.getenv('ONLY_HERE', unset = 'gone')", { language: "r" })).results[0]?.text).toBe('[1] "gone"');
    const bad = await sbx.runCode("stop('boom')", { language: "r" });
    expect(bad.error).toMatchObject({ name: "ERROR", value: expect.stringContaining("boom") });
    const missing = await sbx.runCode("not_defined_here", { language: "r" });
    expect(missing.error?.value).toContain("object 'not_defined_here' not found");
    const ctx = await sbx.createCodeContext({ language: "r", cwd: "/tmp" });
    expect(ctx).toMatchObject({ language: "r", cwd: "/tmp" });
    expect((await sbx.runCode("getwd()", { context: ctx })).results[0]?.text).toBe('[1] "/tmp"');
  });

  it("R cells: hostile per-cell env vars are data: R sees each value unchanged, none runs as R code in the kernel or as a payload on the host, and they are gone after the cell", async () => {
    const hostile = hostileEnv();
    const marker = "/tmp/r-env-injected";
    const envs: Record<string, string> = {
      ...hostile.env,
      // What an R driver that pasted values into R source would run.
      R_QUOTE: `x'); file.create('${marker}'); ('`,
      R_DQUOTE: `x"); file.create("${marker}"); ("`,
      R_NEWLINE: `a\nfile.create('${marker}')\nb`,
      R_BACKSLASH: "a\\'); file.create('/tmp/r-env-injected'); #",
      SHELL_SUBST: `$(touch ${marker}) \`touch ${marker}\``,
      R_PROFILE_USER: `${hostile.dir}/python-startup.py`,
    };
    try {
      const names = Object.keys(envs).map((k) => JSON.stringify(k)).join(", ");
      const exec = await sbx.runCode(`cat(jsonlite::toJSON(as.list(Sys.getenv(c(${names}))), auto_unbox = TRUE))`, { language: "r", envs });
      expect(exec.error).toBeUndefined();
      expect(JSON.parse(exec.logs.stdout.join(""))).toEqual(envs);
      expect(hostile.ran()).toEqual([]);
      expect((await sbx.runCode(`file.exists('${marker}')`, { language: "r" })).results[0]?.text).toBe("[1] FALSE");
      expect((await sbx.runCode("Sys.getenv('R_QUOTE', unset = 'gone')", { language: "r" })).results[0]?.text).toBe('[1] "gone"');
    } finally {
      hostile.dispose();
    }
  });

  it("a Stop pause ends the kernels; a created context comes back (same id and cwd, fresh state) on its next cell", async () => {
    const ctx = await sbx.createCodeContext({ cwd: "/tmp" });
    await sbx.runCode("before = 'stop'", { context: ctx });
    const js = await sbx.createCodeContext({ language: "js" });
    await sbx.runCode("const kept = 1", { context: js });
    expect(await sbx.pause({ keepMemory: false })).toBe(true);
    const back = await Sandbox.connect(sbx.sandboxId, e2b());
    expect((await back.listCodeContexts()).map((c) => c.id)).toEqual(expect.arrayContaining([ctx.id, js.id]));
    const gone = await back.runCode("before", { context: ctx });
    expect(gone.error?.name).toBe("NameError");
    expect((await back.runCode("import os; os.getcwd()", { context: ctx })).text).toBe("'/tmp'");
    expect((await back.runCode("typeof kept", { context: js })).text).toBe("undefined");
    expect((await back.runCode("1 + 1")).text).toBe("2");
    sbx = back;
  });
});

describe("a warm code-interpreter sandbox", { timeout: 120_000 }, () => {
  it("has its Python kernel up before the claim, and the claim's env reaches its cells", async () => {
    const claimed = await Sandbox.create({ ...e2b(), envs: { FROM_CREATE: "yes" } });
    try {
      expect((await claimed.runCode("import os; os.environ.get('FROM_CREATE')")).text).toBe("'yes'");
      // Set for good (not for one cell), as a kernel started after the claim has it.
      expect((await claimed.runCode("import os; os.environ['FROM_CREATE']")).text).toBe("'yes'");
      expect((await claimed.runCode("process.env.FROM_CREATE", { language: "js" })).text).toBe("yes");
    } finally {
      await claimed.kill();
    }
  });
});

describe("port 49999", { timeout: 120_000 }, () => {
  it("in a sandbox whose template has no interpreter it is the user's own port", async () => {
    const base = await BaseSandbox.create(e2b());
    try {
      await base.files.write("/home/user/www/index.html", "mine on 49999");
      await base.commands.run("cd /home/user/www && python3 -m http.server 49999 >/dev/null 2>&1", { background: true });
      const { apiUrl } = e2b();
      let res: { status: number; body: string } | undefined;
      for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(200)) {
        const r = await fetch(`${apiUrl}/index.html`, { headers: { "E2b-Sandbox-Id": base.sandboxId, "E2b-Sandbox-Port": "49999" } });
        res = { status: r.status, body: await r.text() };
        if (res.status === 200) break;
      }
      expect(res).toEqual({ status: 200, body: "mine on 49999" });
    } finally {
      await base.kill();
    }
  });

  it("in a code-interpreter sandbox it is the interpreter", async () => {
    const r = await fetch(`${e2b().apiUrl}/health`, { headers: { "E2b-Sandbox-Id": sbx.sandboxId, "E2b-Sandbox-Port": "49999" } });
    expect(r.status).toBe(200);
    expect(await r.text()).toBe("OK");
  });
});
