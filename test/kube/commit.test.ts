// Commit (issue 18.4, feature gate `Commit`) against the real API server: the controller runs as
// the agent's identity (k8s/rbac.yaml), creates the commit Job with the spec a node needs, and
// every Commit ends with a condition that says why. There is no job controller or kubelet here:
// the test plays them (Job status, the Job's pod and its container's end), the named boundary.
import { BatchV1Api, CoreV1Api, CustomObjectsApi } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CommitController } from "../../controllers/drivers/kubernetes/commit/commit-controller.ts";
import { COMMIT_UID_LABEL, commitJobName } from "../../controllers/drivers/kubernetes/commit/job-spec.ts";
import { EXIT_CODE_GRACE_MS } from "../../controllers/drivers/kubernetes/commit/machine.ts";
import { LABEL } from "../../schema/crd/labels.ts";
import { DEFAULT_COMMIT_TIMEOUT_S } from "../../controllers/drivers/kubernetes/commit/machine.ts";
import { freshNamespace, kubeConfig, kubectl, kubectlOk, until } from "./support/namespace.ts";

const DIGEST = `sha256:${"ab".repeat(32)}`;
let ns: string;
let controller: CommitController;
let skew = 0;
const core = () => kubeConfig().makeApiClient(CoreV1Api);
const batch = () => kubeConfig().makeApiClient(BatchV1Api);

interface Commit {
  metadata: { uid: string };
  status?: { phase?: string; message?: string; commitID?: string; conditions?: { type: string; status: string; reason: string; message: string }[] };
}
const getCommitIn = async (namespace: string, name: string) =>
  (await kubeConfig().makeApiClient(CustomObjectsApi).getNamespacedCustomObject({ group: "agents.kruise.io", version: "v1alpha1", namespace, plural: "commits", name })) as Commit;
const getCommit = (name: string) => getCommitIn(ns, name);

function applyCommit(name: string, spec: string, namespace = ns): void {
  kubectlOk(["-n", namespace, "apply", "-f", "-"], `apiVersion: agents.kruise.io/v1alpha1\nkind: Commit\nmetadata: { name: ${name} }\nspec:\n${spec}`);
}

/** A running target pod on node-a, as the kubelet would report it: a sandbox's (the agent's
 * created-by label) unless `sandbox` is false. */
async function runningPod(name: string, namespace = ns, sandbox = true): Promise<void> {
  await core().createNamespacedPod({ namespace, body: { metadata: { name, labels: sandbox ? { [LABEL.createdBy]: "sandbox" } : {} }, spec: { nodeName: "node-a", containers: [{ name: "sandbox", image: "python:3.12" }, { name: "agent-runtime", image: "rt:1" }] } } });
  const pod = await core().readNamespacedPod({ name, namespace });
  pod.status = {
    phase: "Running",
    containerStatuses: ["sandbox", "agent-runtime"].map((c) => ({ name: c, image: "x", imageID: "", ready: true, restartCount: 0, containerID: `containerd://${c}-0123456789abcdef`, state: { running: { startedAt: new Date() } } })),
  };
  await core().replaceNamespacedPodStatus({ name, namespace, body: pod });
}

/** What the job controller would write when the Job ends. */
async function endJob(commit: string, type: "Complete" | "Failed", reason?: string): Promise<void> {
  const name = commitJobName(commit);
  const job = await batch().readNamespacedJob({ name, namespace: ns });
  const now = new Date();
  const conditions =
    type === "Complete"
      ? [{ type: "SuccessCriteriaMet", status: "True", lastTransitionTime: now }, { type: "Complete", status: "True", lastTransitionTime: now }]
      : [{ type: "FailureTarget", status: "True", reason, lastTransitionTime: now }, { type: "Failed", status: "True", reason, message: `job ${reason}`, lastTransitionTime: now }];
  job.status = {
    startTime: job.status?.startTime ?? now,
    ...(type === "Complete" ? { completionTime: now, succeeded: 1 } : { failed: 1 }),
    conditions: conditions as never,
  };
  await batch().replaceNamespacedJobStatus({ name, namespace: ns, body: job });
}

/** The Job's pod with its container ended (what the kubelet reports). */
async function jobPod(commit: string, exitCode: number, message: string): Promise<void> {
  const uid = (await getCommit(commit)).metadata.uid;
  const name = `${commitJobName(commit).slice(0, 50)}-pod`;
  await core().createNamespacedPod({ namespace: ns, body: { metadata: { name, labels: { [COMMIT_UID_LABEL]: uid } }, spec: { nodeName: "node-a", restartPolicy: "Never", containers: [{ name: "commit", image: "commit:1" }] } } });
  const pod = await core().readNamespacedPod({ name, namespace: ns });
  pod.status = { phase: exitCode === 0 ? "Succeeded" : "Failed", containerStatuses: [{ name: "commit", image: "commit:1", imageID: "", ready: false, restartCount: 0, state: { terminated: { exitCode, message, finishedAt: new Date() } } }] };
  await core().replaceNamespacedPodStatus({ name, namespace: ns, body: pod });
}

const condition = (c: Commit, type: string) => c.status?.conditions?.find((x) => x.type === type);
const endedIn = (namespace: string, name: string) =>
  until(`commit ${name} ends`, async () => {
    const c = await getCommitIn(namespace, name);
    return (c.status?.phase === "Succeeded" || c.status?.phase === "Failed") && c;
  });
const ended = (name: string) => endedIn(ns, name);
const reasonsOf = (name: string) =>
  kubectlOk(["-n", ns, "get", "events", "--field-selector", `involvedObject.kind=Commit,involvedObject.name=${name}`, "-o", "jsonpath={.items[*].reason}"]).split(" ").filter(Boolean);

async function controllerIn(namespace: string, enabled: boolean): Promise<CommitController> {
  const c = new CommitController({ kubeConfig: kubeConfig("agent"), namespace, enabled, job: { image: "ghcr.io/kruise-edge/sandbox-commit:test" }, now: () => Date.now() + skew });
  await c.start();
  return c;
}

beforeAll(async () => {
  ns = await freshNamespace("commit");
  controller = await controllerIn(ns, true);
});
afterAll(async () => {
  await controller?.stop();
});

describe("Commit", () => {
  it("creates the commit Job on the container's node, then Succeeded with the pushed digest", async () => {
    await runningPod("target");
    applyCommit("ok", "  podName: target\n  containerName: sandbox\n  image: registry.example.com/team/app:v2\n  timeoutSeconds: 300\n  registryAuth: { secrets: [regcred] }\n");
    const job = await until("the commit job", () => batch().readNamespacedJob({ name: commitJobName("ok"), namespace: ns }).catch(() => undefined));
    const commit = await getCommit("ok");
    expect(job.metadata!.ownerReferences).toEqual([expect.objectContaining({ kind: "Commit", name: "ok", uid: commit.metadata.uid, controller: true })]);
    expect(job.spec!.backoffLimit).toBe(0);
    expect(job.spec!.activeDeadlineSeconds).toBe(300);
    const pod = job.spec!.template.spec!;
    expect(pod.nodeName).toBe("node-a");
    expect(pod.restartPolicy).toBe("Never");
    // The container's containerd id and the image are arguments, never a shell line.
    expect(pod.containers[0]!.args).toEqual(["sandbox-0123456789abcdef", "registry.example.com/team/app:v2", "0"]);
    expect(pod.containers[0]!.command).toBeUndefined();
    expect(pod.volumes).toEqual(expect.arrayContaining([expect.objectContaining({ name: "auth-0", secret: expect.objectContaining({ secretName: "regcred" }) })]));
    expect(pod.volumes).toEqual(expect.arrayContaining([expect.objectContaining({ hostPath: { path: "/run/containerd/containerd.sock", type: "Socket" } })]));
    await until("Running", async () => (await getCommit("ok")).status?.phase === "Running");

    await jobPod("ok", 0, `${DIGEST}\n`);
    await endJob("ok", "Complete");
    const done = await ended("ok");
    expect(done.status).toMatchObject({ phase: "Succeeded", commitID: DIGEST });
    expect(condition(done, "PushCommittedImage")).toMatchObject({ status: "True", reason: "Pushed", message: `pushed registry.example.com/team/app:v2@${DIGEST}` });
    expect(kubectlOk(["-n", ns, "get", "commit", "ok", "-o", "wide"])).toContain(DIGEST);
    await until("events", () => {
      const r = reasonsOf("ok");
      return r.includes("JobCreated") && r.includes("Pushed");
    });
  });

  it("refuses, with no Job, the platform's containers, a pod that is no sandbox's and an image in a repository the platform runs; a Job without timeoutSeconds gets the default deadline", async () => {
    await runningPod("target5");
    await runningPod("plainpod", ns, false);
    applyCommit("rt", "  podName: target5\n  containerName: agent-runtime\n  image: r.example.com/a:1\n");
    applyCommit("notsbx", "  podName: plainpod\n  image: r.example.com/a:1\n");
    applyCommit("poison", "  podName: target5\n  containerName: sandbox\n  image: ghcr.io/kruise-edge/sandbox-commit:0.2.0\n");
    for (const [name, reason] of [["rt", "PlatformContainer"], ["notsbx", "NotASandbox"], ["poison", "PlatformImage"]] as const) {
      expect(condition(await ended(name), "CommitContainer")).toMatchObject({ status: "False", reason });
      expect(await batch().readNamespacedJob({ name: commitJobName(name), namespace: ns }).catch(() => undefined)).toBeUndefined();
      await until(`${reason} event`, () => reasonsOf(name).includes(reason));
    }
    applyCommit("nodeadline", "  podName: target5\n  image: r.example.com/a:3\n");
    const job = await until("the commit job", () => batch().readNamespacedJob({ name: commitJobName("nodeadline"), namespace: ns }).catch(() => undefined));
    expect(job.spec!.activeDeadlineSeconds).toBe(DEFAULT_COMMIT_TIMEOUT_S);
    expect(DEFAULT_COMMIT_TIMEOUT_S).toBeGreaterThan(0);
  });

  it("fails with PodNotFound when the target pod does not exist", async () => {
    applyCommit("nopod", "  podName: missing\n  image: r.example.com/a:1\n");
    const done = await ended("nopod");
    expect(done.status?.phase).toBe("Failed");
    expect(condition(done, "CommitContainer")).toMatchObject({ status: "False", reason: "PodNotFound", message: "target pod missing not found" });
    await until("PodNotFound event", () => reasonsOf("nopod").includes("PodNotFound"));
  });

  it("fails with ContainerNotFound for a container the pod does not have", async () => {
    await runningPod("target2");
    applyCommit("nocontainer", "  podName: target2\n  containerName: nope\n  image: r.example.com/a:1\n");
    expect(condition(await ended("nocontainer"), "CommitContainer")).toMatchObject({ status: "False", reason: "ContainerNotFound" });
  });

  it("fails with JobCreateFailed and the API server's message when the Job is refused", async () => {
    const quotaNs = await freshNamespace("commitq");
    kubectlOk(["-n", quotaNs, "create", "quota", "no-jobs", "--hard=count/jobs.batch=0"]);
    // The quota controller (kube-controller-manager, not run here) would fill in its status.
    kubectlOk(["-n", quotaNs, "patch", "resourcequota", "no-jobs", "--subresource=status", "--type=merge", "-p", '{"status":{"hard":{"count/jobs.batch":"0"},"used":{"count/jobs.batch":"0"}}}']);
    const c = await controllerIn(quotaNs, true);
    try {
      await runningPod("t", quotaNs);
      applyCommit("q", "  podName: t\n  image: r.example.com/a:1\n", quotaNs);
      const cond = condition(await endedIn(quotaNs, "q"), "CommitContainer")!;
      expect(cond).toMatchObject({ status: "False", reason: "JobCreateFailed" });
      expect(cond.message).toMatch(/^creating the commit job failed: .*(quota|forbidden)/i);
    } finally {
      await c.stop();
    }
  });

  it("waits while the finished Job's exit code is not visible, then fails with ExitCodeNotVisible", async () => {
    await runningPod("target3");
    applyCommit("noexit", "  podName: target3\n  image: r.example.com/a:1\n");
    await until("the commit job", () => batch().readNamespacedJob({ name: commitJobName("noexit"), namespace: ns }).catch(() => undefined));
    await endJob("noexit", "Complete");
    const waiting = await until("ExitCodeNotVisible while waiting", async () => {
      const c = await getCommit("noexit");
      return condition(c, "PushCommittedImage")?.reason === "ExitCodeNotVisible" && c;
    });
    expect(waiting.status?.phase).toBe("Running");
    expect(condition(waiting, "PushCommittedImage")?.status).toBe("Unknown");
    skew = EXIT_CODE_GRACE_MS + 1000;
    try {
      const done = await ended("noexit");
      expect(done.status?.phase).toBe("Failed");
      expect(condition(done, "PushCommittedImage")).toMatchObject({ status: "False", reason: "ExitCodeNotVisible" });
    } finally {
      skew = 0;
    }
  });

  it("fails with the container's message on a non-zero exit, and Timeout past the deadline", async () => {
    await runningPod("target4");
    applyCommit("bad", "  podName: target4\n  image: r.example.com/a:1\n");
    applyCommit("slow", "  podName: target4\n  image: r.example.com/a:2\n  timeoutSeconds: 5\n");
    const names = [commitJobName("bad"), commitJobName("slow")];
    await until("both jobs", async () => (await batch().listNamespacedJob({ namespace: ns })).items.filter((j) => names.includes(j.metadata!.name!)).length === 2);
    await jobPod("bad", 1, "push: unauthorized: authentication required");
    await endJob("bad", "Failed", "BackoffLimitExceeded");
    await endJob("slow", "Failed", "DeadlineExceeded");
    expect(condition(await ended("bad"), "PushCommittedImage")).toMatchObject({ status: "False", reason: "CommitFailed", message: "push: unauthorized: authentication required" });
    expect(condition(await ended("slow"), "PushCommittedImage")).toMatchObject({ status: "False", reason: "Timeout", message: "the commit did not finish within 5s" });
  });

  it("is deleted ttl after it finished; its spec cannot change", async () => {
    applyCommit("short", "  podName: gone\n  image: r.example.com/a:1\n  ttl: 1s\n");
    const r = kubectl(["-n", ns, "patch", "commit", "short", "--type=merge", "-p", '{"spec":{"image":"r.example.com/other:1"}}']);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain("spec is immutable");
    await until("the commit is deleted after its ttl", async () => (await getCommit("short").catch(() => undefined)) === undefined);
  });

  it("with the gate off, only says so", async () => {
    const offNs = await freshNamespace("commitoff");
    const c = await controllerIn(offNs, false);
    try {
      applyCommit("c", "  podName: p\n  image: r.example.com/a:1\n", offNs);
      const got = await until("gate-off status", async () => {
        const x = await getCommitIn(offNs, "c");
        return x.status?.phase ? x : undefined;
      });
      expect(got.status?.phase).toBe("Pending");
      expect(condition(got, "CommitContainer")).toMatchObject({ status: "False", reason: "FeatureGateDisabled" });
      expect((await batch().listNamespacedJob({ namespace: offNs })).items).toHaveLength(0);
    } finally {
      await c.stop();
    }
  });
});
