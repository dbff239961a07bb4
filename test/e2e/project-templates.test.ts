// The project's own code-interpreter template as the system's start-up made it (issue 12.2): built
// through the edge's HTTP build API with the SDK's `Template.build` (the tier's global setup starts
// the system as `npm start` does), so it has a build record with status and logs like any team's
// build. A user's template built `fromTemplate("code-interpreter")` is a code interpreter too:
// `Sandbox.create(name)` + `runCode` through the real @e2b/code-interpreter SDK.
import { Sandbox } from "@e2b/code-interpreter";
import { Template, type LogEntry } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";
import { removeBuiltLayers } from "../support/built-layers.ts";
import { e2b, uniqueTag } from "./sdk.ts";

const store = new RootfsStore();
const outputs: string[] = [];
const startedAt = Date.now();

afterAll(() => removeBuiltLayers(store, outputs, startedAt));

async function api<T>(path: string): Promise<T> {
  const res = await fetch(`${e2b().apiUrl}${path}`, { headers: { "x-api-key": e2b().apiKey } });
  if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

interface TemplateWithBuilds {
  builds: { buildID: string; status: string }[];
}

describe("the project's templates", { timeout: 600_000 }, () => {
  it("start-up built code-interpreter through the build API: GET /templates/code-interpreter lists a ready build whose status and logs have its step lines", async () => {
    const t = await api<TemplateWithBuilds>("/templates/code-interpreter");
    const build = t.builds[0]!;
    expect(build.status).toBe("ready");
    const spec = (await api<{ spec: { image: string; codeInterpreter?: boolean } }>("/admin/teams/admin/templates/code-interpreter")).spec;
    expect(spec).toMatchObject({ image: `b-${build.buildID}`, codeInterpreter: true });
    // The SDK's own status call, as `Template.build` polls it.
    const status = await Template.getBuildStatus({ templateId: "code-interpreter", buildId: build.buildID }, { ...e2b(), logsOffset: 0 });
    expect(status.status).toBe("ready");
    const messages = status.logEntries.map((l) => l.message);
    // Every step of the definition (scripts/lib/templates.ts) has its line, first to last.
    const steps = messages.map((m) => /^(?:CACHED )?\[(\d+)\/(\d+)\] RUN apt-get update/.exec(m)).filter((m) => m !== null);
    expect(steps.length).toBeGreaterThan(0);
    const total = Number(steps[0]![2]);
    expect(steps.map((m) => Number(m[1]))).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    expect(messages).toContain(`Template b-${build.buildID} ready: ${store.template(`b-${build.buildID}`)!.layers.length} layers`);
    const logs = await api<{ logs: { message: string }[] }>(`/templates/code-interpreter/builds/${build.buildID}/logs`);
    expect(logs.logs.map((l) => l.message)).toEqual(expect.arrayContaining(messages.slice(0, 2)));
  });

  it("a template built fromTemplate(\"code-interpreter\") is a code interpreter: runCode in a sandbox of it sees its own step's file", async () => {
    const name = `ci-derived-${uniqueTag()}`;
    const logs: LogEntry[] = [];
    const built = await Template.build(Template().fromTemplate("code-interpreter").runCmd(`echo ${name} > /home/user/derived.txt`), name, { ...e2b(), onBuildLogs: (l) => logs.push(l) });
    outputs.push(`b-${built.buildId}`);
    const sbx = await Sandbox.create(name, e2b());
    try {
      const exec = await sbx.runCode("import pandas; open('/home/user/derived.txt').read().strip()");
      expect(exec.error).toBeUndefined();
      expect(exec.text).toBe(`'${name}'`);
    } finally {
      await sbx.kill();
    }
  });
});
