// What a failing kube test leaves behind, so an intermittent failure can be diagnosed from one run:
// every line the in-process agent logged (structured logs of the agent, reconciler and driver, the
// agent's and CRD link's own lines, across restarts), the edge's workerd log, and the namespace's
// objects and Events as kubectl saw them when the test failed. Kept in memory (bounded) while a
// test runs; written to test/artifacts/kube/<file>/<test>/ and the agent log's tail printed to
// stderr only when the test failed (vitest.kube.config.ts runs `keepOnFailure` after each test).
import { mkdirSync, copyFileSync, existsSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { formatLine, tapLogs } from "../../../controllers/lib/log.ts";

const MAX_LINES = 50_000;
/** Lines printed to stderr on a failure (the whole log is in the artifact). */
const TAIL_LINES = 150;
const lines: string[] = [];
const files = new Map<string, string>();
const dumps = new Map<string, () => string | Promise<string>>();

/** One line of the agent's side, stamped now. */
export function note(source: string, line: string): void {
  lines.push(`${new Date().toISOString()} [${source}] ${line}`);
  if (lines.length > MAX_LINES) lines.splice(0, lines.length - MAX_LINES);
}

let tapped = false;
/** Every structured log line of this process (agent, reconciler, kubernetes driver) is noted. */
export function tapAgentLogs(): void {
  if (tapped) return;
  tapped = true;
  tapLogs((level, component, msg, fields, time) => note("log", formatLine("json", time, level, component, msg, fields)));
}

/** A file copied into the artifact on failure (e.g. the edge's workerd.log); returns its removal. */
export function keepFile(label: string, path: string): () => void {
  files.set(label, path);
  return () => void files.delete(label);
}

/** A text made at failure time (e.g. `kubectl get … -o yaml`); returns its removal. */
export function keepDump(label: string, make: () => string | Promise<string>): () => void {
  dumps.set(label, make);
  return () => void dumps.delete(label);
}

const ROOT = resolve(import.meta.dirname, "../../..");
const safe = (s: string) => s.replace(/[^A-Za-z0-9._-]+/g, "-").slice(0, 80);

/** Writes what was kept when `failed`; then starts the next test with an empty log. */
export async function keepOnFailure(test: { name: string; file?: string; failed: boolean }): Promise<string | undefined> {
  const kept = lines.splice(0);
  if (!test.failed) return undefined;
  const dir = join(ROOT, "test/artifacts/kube", safe(basename(test.file ?? "unknown")), safe(test.name));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "agent.log"), kept.join("\n") + "\n");
  for (const [label, path] of files) if (existsSync(path)) copyFileSync(path, join(dir, `${safe(label)}.log`));
  for (const [label, make] of dumps) {
    let text: string;
    try {
      text = await make();
    } catch (err) {
      text = `(failed: ${(err as Error).message})`;
    }
    writeFileSync(join(dir, `${safe(label)}.txt`), text);
  }
  process.stderr.write(`\n--- kube test failed: logs kept in ${dir}; the agent log's last ${TAIL_LINES} lines ---\n${kept.slice(-TAIL_LINES).join("\n")}\n---\n`);
  return dir;
}
