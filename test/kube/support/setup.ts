// Runs in each kube test file (vitest.kube.config.ts setupFiles): the agent's log is kept while a
// test runs and written out with the cluster's state when it fails (failure-logs.ts).
import { afterEach } from "vitest";
import { keepOnFailure, tapAgentLogs } from "./failure-logs.ts";

tapAgentLogs();
afterEach(async (ctx) => {
  await keepOnFailure({ name: ctx.task.name, file: ctx.task.file?.filepath, failed: ctx.task.result?.state === "fail" });
});
