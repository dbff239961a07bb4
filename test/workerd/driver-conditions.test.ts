// A condition the agent's driver reports of its own (schema/crd/conditions.ts: the local driver's
// SeccompFiltered and UserNamespaced, for a claimed sandbox adopted with a holder an older agent
// started without the seccomp filter or without a user namespace) is on the sandbox's conditions in the admin API, as OpenKruise shows a
// Sandbox's; the scripted agent on the real agent link reports it.
import { describe, expect, it } from "vitest";
import type { ObservationInput } from "../../schema/protocol/index.ts";
import { waitFor } from "../support/wait-for.ts";
import { call, createTeam, expectStatus, startAgent, unique } from "./helpers.ts";

type Shown = { type: string; status: string; reason: string; message?: string; lastTransitionTime: string };

describe("the driver's own conditions", () => {
  it("a holder without the seccomp filter shows as SeccompFiltered False in GET /admin/sandboxes/{id}, and True once the driver says it restarted the holder", async () => {
    const team = await createTeam(unique("seccomp-cond"));
    const agent = await startAgent(team.cluster);
    const id: string = (await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 600 } }), 201)).sandboxID;
    const report = (conditions?: ObservationInput["conditions"]) =>
      agent.report({ sandboxId: id, generation: agent.sandboxes.get(id)!.generation, phase: "Running", ready: true, endpoint: { runtime: `http://${id}.scripted.invalid:49983` }, observedAt: Date.now(), ...(conditions ? { conditions } : {}) });
    const shown = async () => ((await expectStatus(call(`/admin/sandboxes/${id}`), 200)).conditions as Shown[]).find((c) => c.type === "SeccompFiltered");
    expect(await shown()).toBeUndefined();

    const message = "its holder (pid 1) was started by an older agent without the seccomp filter";
    report([{ type: "SeccompFiltered", status: "False", reason: "UnfilteredHolder", message }]);
    const unfiltered = await waitFor(shown, { what: "the condition in the admin API" });
    expect(unfiltered).toEqual({ type: "SeccompFiltered", status: "False", reason: "UnfilteredHolder", message, lastTransitionTime: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) });

    // The sandbox still works for its team; its E2B detail is unchanged.
    expect(await expectStatus(call(`/sandboxes/${id}`, { key: team.key }), 200)).toMatchObject({ sandboxID: id, state: "running" });

    report([{ type: "SeccompFiltered", status: "True", reason: "HolderRestarted", message: "its holder was restarted under the seccomp filter" }]);
    await waitFor(async () => ((await shown())?.status === "True" ? true : undefined), { what: "the condition turned True" });
    expect(await shown()).toMatchObject({ status: "True", reason: "HolderRestarted" });
  });

  it("a holder in the host's user namespace shows as UserNamespaced False beside SeccompFiltered, each turning True as told", async () => {
    const team = await createTeam(unique("userns-cond"));
    const agent = await startAgent(team.cluster);
    const id: string = (await expectStatus(call("/sandboxes", { key: team.key, body: { templateID: team.template, timeout: 600 } }), 201)).sandboxID;
    const report = (conditions: ObservationInput["conditions"]) =>
      agent.report({ sandboxId: id, generation: agent.sandboxes.get(id)!.generation, phase: "Running", ready: true, endpoint: { runtime: `http://${id}.scripted.invalid:49983` }, observedAt: Date.now(), conditions });
    const shown = async () => ((await expectStatus(call(`/admin/sandboxes/${id}`), 200)).conditions as Shown[]).filter((c) => c.type === "SeccompFiltered" || c.type === "UserNamespaced").map(({ type, status, reason }) => `${type}=${status}/${reason}`).sort();

    report([
      { type: "SeccompFiltered", status: "False", reason: "UnfilteredHolder", message: "no filter" },
      { type: "UserNamespaced", status: "False", reason: "HostRootHolder", message: "root inside is the host's root" },
    ]);
    await waitFor(async () => ((await shown()).length === 2 ? true : undefined), { what: "both conditions in the admin API" });
    expect(await shown()).toEqual(["SeccompFiltered=False/UnfilteredHolder", "UserNamespaced=False/HostRootHolder"]);

    report([
      { type: "SeccompFiltered", status: "True", reason: "HolderRestarted", message: "filtered" },
      { type: "UserNamespaced", status: "True", reason: "HolderRestarted", message: "in a range of its own" },
    ]);
    await waitFor(async () => ((await shown()).every((c) => c.includes("=True/")) ? true : undefined), { what: "both turned True" });
    expect(await shown()).toEqual(["SeccompFiltered=True/HolderRestarted", "UserNamespaced=True/HolderRestarted"]);
  });
});
