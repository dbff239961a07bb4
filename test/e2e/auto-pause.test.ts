// Auto-pause by probe through the real e2b SDK against the whole local system: a create with the
// `e2b.agents.kruise.io/auto-pause-policy` metadata extension gets an exec probe run inside the
// sandbox (or an HTTP probe to a port of it); while its output says busy the sandbox keeps running, once it has said idle for the
// threshold the sandbox pauses, traffic wakes it (auto-resume), and a scheduled wake resumes it
// with no traffic at all.
import { Sandbox } from "e2b";
import { afterAll, describe, expect, inject, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { e2b, sleep } from "./sdk.ts";

const created: Sandbox[] = [];
afterAll(async () => {
  await Promise.all(created.map((s) => Sandbox.kill(s.sandboxId, e2b()).catch(() => false)));
});

async function create(policy: Record<string, unknown>): Promise<Sandbox> {
  const sbx = await Sandbox.create("base", {
    ...e2b(),
    metadata: { "e2b.agents.kruise.io/auto-pause-policy": JSON.stringify(policy) },
    lifecycle: { onTimeout: "pause", autoResume: true },
  });
  created.push(sbx);
  return sbx;
}

const probe = { exec: { command: ["cat", "/tmp/activity"] }, periodSeconds: 1, timeoutSeconds: 5 };
const state = async (sbx: Sandbox) => (await Sandbox.getInfo(sbx.sandboxId, e2b())).state;
/** The admin view of the sandbox: its conditions and its auto-pause probe. */
async function admin(sbx: Sandbox) {
  const { apiUrl, apiKey } = inject("e2b");
  return (await (await fetch(new URL(`/admin/sandboxes/${sbx.sandboxId}`, apiUrl), { headers: { "x-api-key": apiKey } })).json()) as any;
}

describe("auto-pause by probe", () => {
  it("a busy sandbox keeps running, an idle one pauses, and traffic wakes it", async () => {
    const sbx = await create({ probe, messageRegex: "^idle$", thresholdDuration: "2s" });
    await sbx.files.write("/tmp/activity", "busy\n");
    await sleep(4_000); // two thresholds of probes that say busy
    expect(await state(sbx)).toBe("running");
    expect(await admin(sbx)).toMatchObject({ autoPause: { probe: { status: "True", message: "busy" }, pauses: 0 } });

    await sbx.files.write("/tmp/activity", "idle\n");
    await waitFor(async () => (await state(sbx)) === "paused", { timeoutMs: 30_000, intervalMs: 200, what: "the probe to pause the sandbox" });

    // Plain data-plane traffic wakes it, and the probe counts again from scratch.
    expect((await sbx.files.read("/tmp/activity")).trim()).toBe("idle");
    await sbx.files.write("/tmp/activity", "busy\n");
    expect(await state(sbx)).toBe("running");
    expect((await admin(sbx)).autoPause.pauses).toBe(1);
  });

  it("a scheduled wake (resume.at) resumes a probe-paused sandbox without traffic", async () => {
    const at = new Date(Date.now() + 12_000).toISOString();
    const sbx = await create({ probe, messageRegex: "^idle$", thresholdDuration: "1s", resume: { at } });
    await sbx.files.write("/tmp/activity", "idle\n");
    await waitFor(async () => (await state(sbx)) === "paused", { timeoutMs: 30_000, intervalMs: 200, what: "the probe to pause the sandbox" });
    await waitFor(async () => (await state(sbx)) === "running", { timeoutMs: 40_000, intervalMs: 200, what: "the scheduled wake" });
  });

  it("an HTTP probe reads a port of the sandbox: busy keeps it running, idle pauses it", async () => {
    const http = { http: { port: 8000, path: "/activity" }, periodSeconds: 1, timeoutSeconds: 5 };
    const sbx = await create({ probe: http, messageRegex: "^idle$", thresholdDuration: "2s" });
    await sbx.files.write("/tmp/www/activity", "busy\n");
    await sbx.commands.run("cd /tmp/www && python3 -m http.server 8000 >/dev/null 2>&1", { background: true });
    await waitFor(async () => (await admin(sbx)).autoPause?.probe?.message === "busy", { timeoutMs: 20_000, intervalMs: 200, what: "the HTTP probe's first answer" });
    expect(await state(sbx)).toBe("running");
    await sbx.files.write("/tmp/www/activity", "idle\n");
    await waitFor(async () => (await state(sbx)) === "paused", { timeoutMs: 30_000, intervalMs: 200, what: "the HTTP probe to pause the sandbox" });
    // Counted once the probe's pause call returns, which may be after the state shows it.
    await waitFor(async () => (await admin(sbx)).autoPause.pauses === 1, { timeoutMs: 30_000, intervalMs: 200, what: "the probe's pause counted" });
  });

  it("refuses a malformed policy with a 400", async () => {
    const both = { ...probe, http: { port: 8000 } };
    for (const bad of [
      "{",
      JSON.stringify({ probe, messageRegex: "(", thresholdDuration: "1s" }),
      JSON.stringify({ probe, messageRegex: "x", thresholdDuration: "soon" }),
      JSON.stringify({ probe: both, messageRegex: "x", thresholdDuration: "1s" }),
      JSON.stringify({ probe: { http: { port: 8000, path: "no-slash" } }, messageRegex: "x", thresholdDuration: "1s" }),
    ]) {
      await expect(Sandbox.create("base", { ...e2b(), metadata: { "e2b.agents.kruise.io/auto-pause-policy": bad } })).rejects.toThrow(/auto-pause-policy/);
    }
  });
});
