// Runs in each kube test file (vitest.kube.config.ts setupFiles): the agent's log is kept while a
// test runs and written out with the cluster's state when it fails (failure-logs.ts).
import { afterEach } from "vitest";
import { keepOnFailure, tapAgentLogs } from "./failure-logs.ts";

// The test kubelet (kube-agent.ts) runs each pod's runtime as a host process and annotates the pod
// with its URL; the driver honours that annotation only when told so (pod-spec.ts runtimeUrl). Set
// before any driver module loads (setup files run first), and inherited by agents spawned from here.
process.env.KRUISE_TEST_RUNTIME_URL_ANNOTATION = "1";

tapAgentLogs();
afterEach(async (ctx) => {
  await keepOnFailure({ name: ctx.task.name, file: ctx.task.file?.filepath, failed: ctx.task.result?.state === "fail" });
});
