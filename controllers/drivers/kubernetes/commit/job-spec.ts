// The commit Job: one pod on the target container's node that commits the container with the
// node's containerd (nerdctl, as upstream) and pushes the image. What it runs is the commit
// image's entrypoint (`k8s/commit/commit.sh`); the tenant's values reach it only as arguments.
import { createHash } from "node:crypto";
import type { V1Job } from "@kubernetes/client-node";
import { API_VERSION } from "../../../../schema/crd/labels.ts";
import { commitTimeoutS, type CommitSpec } from "./machine.ts";

/** Label on the Job and its pod: the Commit's uid (names may exceed a label value's 63). */
export const COMMIT_UID_LABEL = "agents.kruise.io/commit-uid";
export const COMMIT_CONTAINER = "commit";
const AUTH_DIR = "/var/run/commit-auth";

export interface CommitJobOptions {
  /** The image whose entrypoint commits and pushes (`--commit-image`). */
  image: string;
  /** The node's containerd socket. */
  containerdSocket?: string;
}

/** `commit-<name>`, at most 63 characters (a Job's name becomes its pods' `job-name` label). */
export function commitJobName(commit: string): string {
  const name = `commit-${commit}`;
  if (name.length <= 63) return name;
  return `${name.slice(0, 52).replace(/[-.]+$/, "")}-${createHash("sha256").update(commit).digest("hex").slice(0, 10)}`;
}

export function commitJob(
  o: CommitJobOptions,
  commit: { name: string; namespace: string; uid: string; spec: CommitSpec },
  target: { containerId: string; nodeName: string },
): V1Job {
  const labels = { [COMMIT_UID_LABEL]: commit.uid };
  const secrets = commit.spec.registryAuth?.secrets ?? [];
  const socket = o.containerdSocket ?? "/run/containerd/containerd.sock";
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: {
      name: commitJobName(commit.name),
      namespace: commit.namespace,
      labels,
      ownerReferences: [{ apiVersion: API_VERSION, kind: "Commit", name: commit.name, uid: commit.uid, controller: true, blockOwnerDeletion: true }],
    },
    spec: {
      // One attempt: a second commit of a container that changed meanwhile is another image.
      backoffLimit: 0,
      // Always a deadline (DEFAULT_COMMIT_TIMEOUT_S when the Commit sets none): a hung commit would
      // otherwise hold a root pod with the node's containerd socket for ever.
      activeDeadlineSeconds: commitTimeoutS(commit.spec),
      template: {
        metadata: { labels },
        spec: {
          restartPolicy: "Never",
          // The container lives in this node's containerd; nothing else can reach it.
          nodeName: target.nodeName,
          tolerations: [{ operator: "Exists" }],
          automountServiceAccountToken: false,
          containers: [
            {
              name: COMMIT_CONTAINER,
              image: o.image,
              // containerd id without the `containerd://` scheme; image and squash count as data.
              args: [target.containerId.replace(/^[a-z]+:\/\//, ""), commit.spec.image, String(commit.spec.squashLayer ?? 0)],
              env: [{ name: "CONTAINERD_NAMESPACE", value: "k8s.io" }, { name: "COMMIT_AUTH_DIR", value: AUTH_DIR }],
              // The pushed digest is the termination message; a failure's log tail stands in for it.
              terminationMessagePolicy: "FallbackToLogsOnError",
              securityContext: { runAsUser: 0 },
              volumeMounts: [
                { name: "containerd", mountPath: "/run/containerd/containerd.sock" },
                ...secrets.map((_, i) => ({ name: `auth-${i}`, mountPath: `${AUTH_DIR}/${i}`, readOnly: true })),
              ],
            },
          ],
          volumes: [
            { name: "containerd", hostPath: { path: socket, type: "Socket" } },
            ...secrets.map((secretName, i) => ({ name: `auth-${i}`, secret: { secretName, items: [{ key: ".dockerconfigjson", path: "config.json" }] } })),
          ],
        },
      },
    },
  };
}
