// The JavaScript kernel driver's source, run inside the sandbox as `node -e <source>` by the
// sandbox's own node. Kept as a string so the runtime's bundle (a pod's runtime) carries it too.
//
// The same line protocol as the Python driver (kernel-driver-source.ts), with one difference: a
// busy cell blocks node's event loop, so stdin is not read while it runs; the runtime interrupts a
// cell with SIGINT instead of a {"op":"cancel"} line (both are honoured).
// Cells run in one global context through node's own REPL evaluator (a public API), which is what
// gives E2B's JS kernel semantics: top-level const/let/function persist across cells, top-level
// `await` works (and its declarations persist too), and the value of the last expression is the
// cell's result.
// TypeScript (`node -e <source> typescript`): each cell is transpiled inside the sandbox, by the
// sandbox's node (its own type stripping, node ≥ 22.13) or else by the Babel TypeScript preset the
// template carries (Debian's node-babel7, in base); with neither the driver exits at start saying
// so, and creating the context fails with that message.
// Results: a string is its own text (E2B's JS kernel answers 'Hello' as Hello); an array or a
// plain object is `text` (util.inspect) plus `json`; a value with a Symbol.for("Jupyter.display")
// method (Deno's convention) is the MIME bundle it returns (html, svg, png, markdown, …).
import { DRIVER_COMMANDS_SOURCE } from "./driver-commands-source.ts";

export const JS_DRIVER_SOURCE = String.raw`(() => {
  "use strict";
  const repl = require("node:repl");
  const util = require("node:util");
  const { PassThrough, Writable } = require("node:stream");
  const { Console } = require("node:console");
  const typescript = process.argv[1] === "typescript";

  // The TypeScript transpiler this sandbox has, or null.
  const tsTranspiler = () => {
    const mod = require("node:module");
    if (typeof mod.stripTypeScriptTypes === "function") {
      try {
        mod.stripTypeScriptTypes("let a: number = 1", { mode: "transform" });
        return (code) => mod.stripTypeScriptTypes(code, { mode: "transform" });
      } catch {
        // a node whose type stripping is off: try the next
      }
    }
    try {
      const babel = require("@babel/core");
      const preset = require("@babel/preset-typescript");
      const opts = { presets: [preset], filename: "cell.ts", babelrc: false, configFile: false, retainLines: true, sourceType: "script", parserOpts: { allowAwaitOutsideFunction: true, allowReturnOutsideFunction: true } };
      return (code) => {
        try {
          return babel.transformSync(code, opts).code;
        } catch (err) {
          // Babel's own frames and its file name are no use to the cell's author: its message is.
          const e = new SyntaxError(String(err && err.message).replace(/^[^\n]*?cell\.ts: /, ""));
          e.stack = "SyntaxError: " + e.message;
          throw e;
        }
      };
    } catch {
      return null;
    }
  };
  const transpile = typescript ? tsTranspiler() : null;
  if (typescript && !transpile) {
    process.stderr.write("this sandbox has no TypeScript transpiler: its node has no type stripping (node >= 22.13) and @babel/core with @babel/preset-typescript is not installed (Debian: node-babel7)\n");
    process.exit(3);
  }

  const MIME = { "text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf", "text/latex": "latex", "application/json": "json", "application/javascript": "javascript" };
  const DISPLAY = Symbol.for("Jupyter.display");
  const MAX_JSON = 1 << 20;
  const plain = (v) => Array.isArray(v) || (v !== null && typeof v === "object" && [Object.prototype, null].includes(Object.getPrototypeOf(v)));
  const resultOf = (value) => {
    const res = { type: "result", is_main_result: true };
    if (value !== null && (typeof value === "object" || typeof value === "function") && typeof value[DISPLAY] === "function") {
      const bundle = value[DISPLAY]();
      if (bundle && typeof bundle === "object") {
        for (const [mime, v] of Object.entries(bundle)) {
          if (MIME[mime]) res[MIME[mime]] = v;
          else (res.extra = res.extra || {})[mime] = v;
        }
      }
      if (typeof res.text !== "string") res.text = util.inspect(value);
      return res;
    }
    if (typeof value === "string") {
      res.text = value;
      return res;
    }
    res.text = util.inspect(value);
    if (plain(value)) {
      try {
        const j = JSON.stringify(value);
        if (j !== undefined && j.length <= MAX_JSON) res.json = JSON.parse(j);
      } catch {
        // cyclic or a BigInt inside: text only
      }
    }
    return res;
  };

  // The protocol stream; nothing the cells print may reach it except through send().
  const protocol = process.stdout.write.bind(process.stdout);
  const send = (msg) => protocol(JSON.stringify(msg) + "\n");
  let current = null; // { id, cancelled }
  let pending = null; // the running cell's completion callback
  let executions = 0;

  const emit = (kind) => (chunk, encoding, cb) => {
    const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
    if (current && text) send({ id: current.id, line: { type: kind, text, timestamp: Date.now() * 1000 } });
    if (typeof encoding === "function") encoding();
    else if (typeof cb === "function") cb();
    return true;
  };
  process.stdout.write = emit("stdout");
  process.stderr.write = emit("stderr");
  const cellOut = new Writable({ write: (c, e, cb) => emit("stdout")(c, e, cb) });
  const cellErr = new Writable({ write: (c, e, cb) => emit("stderr")(c, e, cb) });
  globalThis.console = new Console({ stdout: cellOut, stderr: cellErr });

  const server = repl.start({
    prompt: "",
    input: new PassThrough(),
    output: new Writable({ write: (_c, _e, cb) => cb() }),
    terminal: false,
    useGlobal: true,
    breakEvalOnSigint: true,
    ignoreUndefined: true,
  });
  // The REPL hands a cell's error to its domain (which would print it to the REPL's output) rather
  // than to the eval callback; so does an error a timer of a cell throws later. Take them over.
  const domain = server._domain;
  domain.removeAllListeners("error");
  domain.on("error", (err) => (pending ? pending(err) : stray(err)));
  // SIGINT is how the runtime interrupts a cell. While the cell's synchronous part runs, node's
  // breakOnSigint watchdog turns it into an error, and only without a listener of ours (with one,
  // the signal waits for the loop). Otherwise (a cell awaiting, or no cell) our listener takes
  // it: it ends an awaited promise (the REPL races it against its own SIGINT event), or is ignored.
  const onSigint = () => server.emit("SIGINT");
  process.on("SIGINT", onSigint);

  const errorLine = (err) => {
    if (err instanceof Error || (err && typeof err === "object" && "stack" in err)) {
      const e = err.err && err.constructor && err.constructor.name === "Recoverable" ? err.err : err;
      // The frames below the cell are the REPL's and this driver's: of no use to the cell's author.
      const stack = String(e.stack || "").split("\n").filter((l) => !/^\s+at .*(node:|\[eval\])/.test(l)).join("\n");
      return { type: "error", name: String(e.name || "Error"), value: String(e.message ?? ""), traceback: stack };
    }
    return { type: "error", name: "Error", value: util.inspect(err), traceback: "Uncaught " + util.inspect(err) };
  };

  const withEnv = (env) => {
    const saved = {};
    for (const [k, v] of Object.entries(env || {})) {
      saved[k] = process.env[k];
      process.env[k] = v;
    }
    return () => {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    };
  };

  const queue = [];
  let busy = false;
  const next = () => {
    if (busy) return;
    const job = queue.shift();
    if (!job) return;
    if (job.cancelled) {
      send({ id: job.id, done: true });
      return next();
    }
    busy = true;
    current = job;
    const finish = () => {
      send({ id: job.id, line: { type: "end_of_execution" } });
      send({ id: job.id, done: true });
      current = null;
      busy = false;
      setImmediate(next);
    };
    send({ id: job.id, line: { type: "number_of_executions", execution_count: ++executions } });
    const restore = withEnv(job.env);
    let settled = false;
    const done = (err, value) => {
      if (settled) return;
      settled = true;
      pending = null;
      restore();
      const line = (kind, v) => send({ id: job.id, line: kind === "error" ? errorLine(v) : v });
      if (err) line("error", err);
      else if (value !== undefined) {
        // A Jupyter.display method is the cell author's code: its throw is the cell's error.
        let res;
        try {
          res = resultOf(value);
        } catch (e) {
          line("error", e);
        }
        if (res) line("result", res);
      }
      // Let output the cell wrote just before it ended (console is synchronous, timers are not) land first.
      setImmediate(finish);
    };
    pending = done;
    process.off("SIGINT", onSigint);
    try {
      server.eval(transpile ? transpile(job.code) : job.code, server.context, "<cell>", done);
    } catch (err) {
      done(err);
    } finally {
      process.on("SIGINT", onSigint);
    }
  };

  // An error a cell left behind (a rejected promise nobody awaited, a throwing timer) is reported
  // on the cell that is running, if any, as E2B's kernel does; it never ends the driver.
  function stray(err) {
    if (current) send({ id: current.id, line: { type: "stderr", text: "Uncaught " + (err && err.stack ? err.stack : util.inspect(err)) + "\n", timestamp: Date.now() * 1000 } });
  }
  process.on("uncaughtException", stray);
  process.on("unhandledRejection", stray);

  const interrupt = () => server.emit("SIGINT");
${DRIVER_COMMANDS_SOURCE}})();
`;
