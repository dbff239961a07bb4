// Where the agent pulls a pod's audit records from (traffic-objects.ts `auditUrl`), with the
// sandbox's pull token, filing the answer under that sandbox. A pod object can outlive its address:
// an evicted or failed pod keeps `status.podIP` while the CNI gives the address to another pod
// (another tenant's, whose code may listen on the health port). So only a Running pod whose
// traffic-proxy is ready is pulled from. The pods are as the informer keeps them (slimPod).
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { slimPod } from "../../../../../controllers/drivers/kubernetes/slim.ts";
import { auditUrl } from "../../../../../controllers/drivers/kubernetes/traffic-objects.ts";
import { HEALTH_PORT, TRAFFIC_CONTAINER } from "../../../../../controllers/drivers/kubernetes/traffic-pod.ts";
import { LABEL } from "../../../../../schema/crd/labels.ts";

const status = (name: string, ready: boolean, state: V1ContainerStatus["state"]): V1ContainerStatus => ({ name, image: "i", imageID: "", ready, restartCount: 0, state });
const running = { running: { startedAt: new Date() } };

function pod(phase: string, proxy: V1ContainerStatus): V1Pod {
  return slimPod({
    metadata: { name: "sbx-a", namespace: "team-a", labels: { [LABEL.trafficProxy]: "governed" } },
    status: { phase, podIP: "10.0.0.7", containerStatuses: [status("runtime", true, running), proxy] },
  });
}

describe("the audit pull's address", () => {
  it("is the pod's IP while it is Running with its traffic-proxy ready", () => {
    expect(auditUrl(pod("Running", status(TRAFFIC_CONTAINER, true, running)))).toBe(`http://10.0.0.7:${HEALTH_PORT}`);
  });

  it("is none for a Failed or Succeeded pod that still names an IP (the address may be another pod's now)", () => {
    const gone = { terminated: { exitCode: 137, reason: "Evicted" } };
    expect(auditUrl(pod("Failed", status(TRAFFIC_CONTAINER, false, gone)))).toBeUndefined();
    expect(auditUrl(pod("Succeeded", status(TRAFFIC_CONTAINER, false, gone)))).toBeUndefined();
    // Even if its last-known statuses still say ready (a node lost with the pod marked Failed).
    expect(auditUrl(pod("Failed", status(TRAFFIC_CONTAINER, true, running)))).toBeUndefined();
  });

  it("is none while the traffic-proxy is not ready (restarting: another process may hold its port)", () => {
    expect(auditUrl(pod("Running", status(TRAFFIC_CONTAINER, false, { waiting: { reason: "CrashLoopBackOff" } })))).toBeUndefined();
  });

  it("counts a traffic-proxy run as a native sidecar (an init container)", () => {
    const p = slimPod({
      metadata: { name: "sbx-a", namespace: "team-a", labels: { [LABEL.trafficProxy]: "governed" } },
      status: { phase: "Running", podIP: "10.0.0.7", initContainerStatuses: [status(TRAFFIC_CONTAINER, true, running)], containerStatuses: [status("runtime", true, running)] },
    });
    expect(auditUrl(p)).toBe(`http://10.0.0.7:${HEALTH_PORT}`);
  });
});
