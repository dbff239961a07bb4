// A build request's ENV steps are checked as the template's env they make, with the schema every
// tenant env goes through (EnvVars): a name zod's record would skip (`__proto__`) is a 400, not a
// variable that vanishes from the built template behind a 2xx.
import { describe, expect, it } from "vitest";
import { MAX_ENV_VARS } from "../../../schema/api/limits.ts";
import { stepsEnv, TemplateBuildStart } from "../../../schema/api/template-build.ts";

const env = (...args: string[]) => ({ type: "ENV", args });
const problems = (steps: unknown[]) => {
  const r = TemplateBuildStart.safeParse({ steps });
  return r.success ? [] : r.error.issues.map((i) => i.message);
};

describe("TemplateBuildStart's ENV steps", () => {
  it("refuse what a template's env may not hold: __proto__, a bad name, the count over all steps", () => {
    expect(problems([env("__proto__", "secret")])).toEqual([expect.stringMatching(/__proto__ is not allowed/)]);
    expect(problems([env("A", "1"), env("__proto__", "secret")])).toEqual([expect.stringMatching(/__proto__ is not allowed/)]);
    expect(problems([env("1BAD", "x")])).toEqual([expect.stringMatching(/ENV 1BAD: env var names are/)]);
    const vars = (from: number) => env(...Array.from({ length: MAX_ENV_VARS / 2 + 1 }, (_, i) => [`V${from + i}`, "x"]).flat());
    expect(problems([vars(0), vars(MAX_ENV_VARS)])).toEqual([expect.stringMatching(new RegExp(`at most ${MAX_ENV_VARS} env vars`))]);
  });

  it("accept a later ENV setting a name again (it wins), over a base's env", () => {
    const steps = [env("A", "1", "B", "2"), env("A", "3")];
    expect(problems(steps)).toEqual([]);
    expect(stepsEnv(TemplateBuildStart.parse({ steps }).steps, { A: "0", C: "4" })).toEqual({ A: "3", B: "2", C: "4" });
  });
});
