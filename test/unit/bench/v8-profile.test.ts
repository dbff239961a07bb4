// bench/claim-profile.ts's split of a V8 CPU profile by kind: the product and the feature skeleton
// share no source file, so only this split puts their rows side by side (is a create's excess
// storage, JS or the runtime?). Each sample's time lands in the kind of the frame that ran.
import { expect, it } from "vitest";
import { selfTimes, type CpuProfile } from "../../../bench/v8-profile.ts";

it("sums a profile's samples by kind: own modules, libraries, V8's entries, SQLite statements and commits, other runtime calls; idle left out", () => {
  const frame = (functionName: string, url = "", lineNumber = 0) => ({ functionName, url, lineNumber });
  const profile: CpuProfile = {
    nodes: [
      { id: 1, callFrame: frame("(root)"), children: [2, 3, 4, 9] },
      { id: 2, callFrame: frame("(program)") },
      { id: 3, callFrame: frame("(garbage collector)") },
      { id: 4, callFrame: frame("flush", "index.js", 10), children: [5, 6, 7, 8] },
      { id: 5, callFrame: frame("exec") },
      { id: 6, callFrame: frame("transactionSync") },
      { id: 7, callFrame: frame("setTimeout") },
      { id: 8, callFrame: frame("parse", "index.js", 900) },
      { id: 9, callFrame: frame("(idle)") },
    ],
    // Each sample's time is the delta to the next one (the last sample's is dropped).
    samples: [2, 3, 4, 5, 6, 7, 8, 9, 2],
    timeDeltas: [0, 1, 2, 4, 8, 16, 32, 64, 128],
  };
  const { byKind, sampled } = selfTimes(profile, (_url, line) => (line < 500 ? "durable-objects/pool/store.ts" : "node_modules/zod/v4/core/schemas.js"));
  expect(Object.fromEntries(byKind)).toEqual({
    "(program)": 1,
    "(garbage collector)": 2,
    "JS: own modules": 4,
    "SQLite statements (exec, cursor reads)": 8,
    "SQLite commits asked for (transactionSync, sync)": 16,
    "other runtime calls": 32,
    "JS: libraries (node_modules)": 64,
  });
  expect(sampled).toBe(127);
});
