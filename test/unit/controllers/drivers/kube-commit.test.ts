// The Commit machine (controllers/drivers/kubernetes/commit/machine.ts), the Job's name and the
// feature-gate flag: each way a Commit ends, and what it waits on.
import { describe, expect, it } from "vitest";
import { decideCommit, DEFAULT_COMMIT_TIMEOUT_S, EXIT_CODE_GRACE_MS, imageRepository, jobCreated, jobRefused, POLL_MS, type CommitInputs } from "../../../../controllers/drivers/kubernetes/commit/machine.ts";
import { commitJob, commitJobName } from "../../../../controllers/drivers/kubernetes/commit/job-spec.ts";
import { featureGatesFlag } from "../../../../controllers/drivers/kubernetes/flags.ts";

const NOW = Date.parse("2026-12-01T12:00:00Z");
const DIGEST = `sha256:${"0f".repeat(32)}`;
const pod = { nodeName: "n1", containers: ["main", "side", "agent-runtime"], containerIds: { main: "containerd://abc", side: "containerd://def", "agent-runtime": "containerd://123" }, sandbox: true };
const inputs = (over: Partial<CommitInputs> = {}): CommitInputs => ({
  name: "c",
  generation: 1,
  spec: { podName: "p", image: "r/x:1" },
  status: {},
  gate: true,
  pod,
  job: null,
  exit: null,
  now: NOW,
  platformImages: ["ghcr.io/kruise-edge/sandbox-agent:0.1.0", "ghcr.io/kruise-edge/sandbox-commit:0.1.0", "docker.io/e2bdev/code-interpreter:latest"],
  ...over,
});
const running = { phase: "Running" as const, startTime: new Date(NOW - 1000).toISOString() };
const cond = (d: ReturnType<typeof decideCommit>, type: string) => d.status?.conditions?.find((c) => c.type === type);

describe("decideCommit", () => {
  it("gate off: Pending with FeatureGateDisabled, once (no second write)", () => {
    const d = decideCommit(inputs({ gate: false }));
    expect(d.status?.phase).toBe("Pending");
    expect(cond(d, "CommitContainer")).toMatchObject({ status: "False", reason: "FeatureGateDisabled" });
    expect(decideCommit(inputs({ gate: false, status: d.status! }))).toEqual({});
  });

  it("a missing pod or container fails; a container not started waits", () => {
    expect(cond(decideCommit(inputs({ pod: null })), "CommitContainer")).toMatchObject({ reason: "PodNotFound", message: "target pod p not found" });
    expect(decideCommit(inputs({ pod: null })).status).toMatchObject({ phase: "Failed", completionTime: new Date(NOW).toISOString() });
    expect(cond(decideCommit(inputs({ spec: { podName: "p", image: "r/x:1", containerName: "other" } })), "CommitContainer")?.reason).toBe("ContainerNotFound");
    const waiting = decideCommit(inputs({ pod: { ...pod, containerIds: {} } }));
    expect(waiting.status?.phase).toBe("Pending");
    expect(waiting.requeueAfterMs).toBe(POLL_MS);
    expect(decideCommit(inputs({ pod: { ...pod, nodeName: undefined } })).createJob).toBeUndefined();
  });

  it("creates the Job for the named container, else the first", () => {
    expect(decideCommit(inputs()).createJob).toEqual({ container: "main", containerId: "containerd://abc", nodeName: "n1" });
    expect(decideCommit(inputs({ spec: { podName: "p", image: "r/x:1", containerName: "side" } })).createJob?.containerId).toBe("containerd://def");
    const made = jobCreated(inputs(), "commit-c", "n1");
    expect(made.status).toMatchObject({ phase: "Running", startTime: new Date(NOW).toISOString() });
    expect(made.event).toMatchObject({ type: "Normal", reason: "JobCreated" });
    const refused = jobRefused(inputs(), 'jobs.batch "commit-c" is forbidden: exceeded quota');
    expect(refused.status?.phase).toBe("Failed");
    expect(refused.status?.conditions?.[0]).toMatchObject({ type: "CommitContainer", status: "False", reason: "JobCreateFailed", message: 'creating the commit job failed: jobs.batch "commit-c" is forbidden: exceeded quota' });
  });

  it("refuses, before any Job, a platform container, a pod that is no sandbox's, and an image in a repository the platform runs", () => {
    const refused = (over: Partial<CommitInputs>) => {
      const d = decideCommit(inputs(over));
      expect(d.createJob).toBeUndefined();
      expect(d.status?.phase).toBe("Failed");
      expect(d.event).toMatchObject({ type: "Warning" });
      return cond(d, "CommitContainer");
    };
    for (const containerName of ["agent-runtime", "traffic-proxy", "csi"]) {
      expect(refused({ pod: { ...pod, containers: [...pod.containers, containerName] }, spec: { podName: "p", image: "r/x:1", containerName } })).toMatchObject({ reason: "PlatformContainer", message: expect.stringContaining(`container ${containerName} of pod p is the platform's`) });
    }
    expect(refused({ pod: { ...pod, sandbox: false } })).toMatchObject({ reason: "NotASandbox" });
    for (const image of ["ghcr.io/kruise-edge/sandbox-agent:0.1.0", "GHCR.io/kruise-edge/sandbox-agent:0.1.1", `ghcr.io/kruise-edge/sandbox-agent@sha256:${"1".repeat(64)}`, "ghcr.io/kruise-edge/sandbox-commit", "e2bdev/code-interpreter:v2", "index.docker.io/e2bdev/code-interpreter"]) {
      expect(refused({ spec: { podName: "p", image } })).toMatchObject({ reason: "PlatformImage" });
    }
    // Another repository of the same registry, or a look-alike name, is the tenant's.
    for (const image of ["ghcr.io/kruise-edge/sandbox-agent-fork:1", "ghcr.io/team/sandbox-agent:0.1.0", "registry.example.com:5000/kruise-edge/sandbox-agent:0.1.0"]) {
      expect(decideCommit(inputs({ spec: { podName: "p", image } })).createJob).toBeDefined();
    }
  });

  it("image repositories compare as containerd names them", () => {
    expect(imageRepository("python")).toBe("docker.io/library/python");
    expect(imageRepository("python:3.12")).toBe("docker.io/library/python");
    expect(imageRepository("docker.io/library/python@sha256:ab")).toBe("docker.io/library/python");
    expect(imageRepository("localhost/x:1")).toBe("localhost/x");
    expect(imageRepository("localhost:5000/a/b:1")).toBe("localhost:5000/a/b");
  });

  it("the commit Job always has a deadline: the Commit's, or the default", () => {
    const commit = (timeoutSeconds?: number) => ({ name: "c", namespace: "n", uid: "u", spec: { podName: "p", image: "r/x:1", timeoutSeconds } });
    const target = { containerId: "containerd://abc", nodeName: "n1" };
    expect(DEFAULT_COMMIT_TIMEOUT_S).toBe(3600);
    expect(commitJob({ image: "commit:1" }, commit(), target).spec!.activeDeadlineSeconds).toBe(DEFAULT_COMMIT_TIMEOUT_S);
    expect(commitJob({ image: "commit:1" }, commit(0), target).spec!.activeDeadlineSeconds).toBe(DEFAULT_COMMIT_TIMEOUT_S);
    expect(commitJob({ image: "commit:1" }, commit(300), target).spec!.activeDeadlineSeconds).toBe(300);
    const timedOut = decideCommit(inputs({ status: running, job: { complete: false, failed: { reason: "DeadlineExceeded" } } }));
    expect(cond(timedOut, "PushCommittedImage")).toMatchObject({ reason: "Timeout", message: `the commit did not finish within ${DEFAULT_COMMIT_TIMEOUT_S}s` });
  });

  it("a Job deleted mid-run fails the Commit instead of committing twice", () => {
    const d = decideCommit(inputs({ status: running }));
    expect(d.createJob).toBeUndefined();
    expect(cond(d, "CommitContainer")?.reason).toBe("JobNotFound");
  });

  it("the Job's end: pushed, failed exit, no digest, timeout", () => {
    const complete = { complete: true, finishedAt: NOW };
    const ok = decideCommit(inputs({ status: running, job: complete, exit: { exitCode: 0, message: `${DIGEST}\n` } }));
    expect(ok.status).toMatchObject({ phase: "Succeeded", commitID: DIGEST, message: `pushed r/x:1@${DIGEST}` });
    expect(ok.status?.startTime).toBe(running.startTime);
    expect(cond(ok, "PushCommittedImage")).toMatchObject({ status: "True", reason: "Pushed" });
    const bad = decideCommit(inputs({ status: running, job: { complete: false, failed: { reason: "BackoffLimitExceeded" } }, exit: { exitCode: 1, message: "push: denied\n" } }));
    expect(cond(bad, "PushCommittedImage")).toMatchObject({ reason: "CommitFailed", message: "push: denied" });
    expect(cond(decideCommit(inputs({ status: running, job: complete, exit: { exitCode: 3, message: "boom" } })), "PushCommittedImage")?.message).toBe("exit code 3: boom");
    expect(cond(decideCommit(inputs({ status: running, job: complete, exit: { exitCode: 0, message: "done" } })), "PushCommittedImage")?.reason).toBe("NoDigest");
    const slow = decideCommit(inputs({ spec: { podName: "p", image: "r/x:1", timeoutSeconds: 30 }, status: running, job: { complete: false, failed: { reason: "DeadlineExceeded" } } }));
    expect(cond(slow, "PushCommittedImage")).toMatchObject({ reason: "Timeout", message: "the commit did not finish within 30s" });
    expect(bad.event?.type).toBe("Warning");
  });

  it("an exit code out of sight waits up to the grace period, then fails", () => {
    const job = { complete: true, finishedAt: NOW };
    const waiting = decideCommit(inputs({ status: running, job }));
    expect(waiting.status?.phase).toBe("Running");
    expect(cond(waiting, "PushCommittedImage")).toMatchObject({ status: "Unknown", reason: "ExitCodeNotVisible" });
    expect(waiting.requeueAfterMs).toBe(POLL_MS);
    const late = decideCommit(inputs({ status: running, job, now: NOW + EXIT_CODE_GRACE_MS }));
    expect(late.status?.phase).toBe("Failed");
    expect(cond(late, "PushCommittedImage")).toMatchObject({ status: "False", reason: "ExitCodeNotVisible" });
  });

  it("a running Job is polled; a finished Commit waits for its ttl, then is deleted", () => {
    expect(decideCommit(inputs({ status: running, job: { complete: false } }))).toEqual({ requeueAfterMs: POLL_MS });
    const done = { phase: "Succeeded" as const, completionTime: new Date(NOW - 10_000).toISOString() };
    expect(decideCommit(inputs({ status: done }))).toEqual({});
    expect(decideCommit(inputs({ status: done, spec: { podName: "p", image: "r/x:1", ttl: "30s" } }))).toEqual({ requeueAfterMs: 20_000 });
    expect(decideCommit(inputs({ status: done, spec: { podName: "p", image: "r/x:1", ttl: "5s" } }))).toEqual({ delete: true });
  });
});

describe("commit job name and feature gates", () => {
  it("names the Job commit-<name> within 63 characters, distinct for long names", () => {
    expect(commitJobName("abc")).toBe("commit-abc");
    const a = commitJobName(`${"x".repeat(70)}a`);
    const b = commitJobName(`${"x".repeat(70)}b`);
    expect(a.length).toBeLessThanOrEqual(63);
    expect(a).not.toBe(b);
    expect(a).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
  });

  it("parses --feature-gates, refusing unknown gates and values", () => {
    expect(featureGatesFlag("")).toEqual({ Commit: false });
    expect(featureGatesFlag("Commit=true")).toEqual({ Commit: true });
    expect(() => featureGatesFlag("Comit=true")).toThrow(/Comit=true/);
    expect(() => featureGatesFlag("Commit=yes")).toThrow(/Name=true\|false/);
  });
});
