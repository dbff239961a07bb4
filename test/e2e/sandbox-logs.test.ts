// E2B's sandbox logs routes over the whole system, through the e2b SDK's own API client (its
// openapi-fetch client, which sends X-API-KEY as the SDK does): the runtime's process starts and
// exits and the sandbox's phase changes, kept by the agent and fetched over its link.
import { ApiClient, ConnectionConfig, Sandbox } from "e2b";
import { describe, expect, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { e2b, uniqueTag } from "./sdk.ts";

function api() {
  return new ApiClient(new ConnectionConfig(e2b())).api;
}

describe("sandbox logs", () => {
  it("v2 lists the sandbox's runtime entries with the command's pid and exit code; v1 the same as lines", async () => {
    const sbx = await Sandbox.create(e2b());
    try {
      const run = await sbx.commands.run("echo hello; exit 0", { background: true });
      await run.wait();
      const entries = async () => {
        const res = await api().GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: sbx.sandboxId }, query: { limit: 1000 } } });
        expect(res.response.status).toBe(200);
        return res.data!.logs;
      };
      await waitFor(async () => (await entries()).some((e) => e.message === "process exited"));
      const logs = await entries();
      expect(logs.find((e) => e.message === "phase" && e.fields.phase === "Running")).toMatchObject({ level: "info", fields: { component: "reconciler" } });
      expect(logs.find((e) => e.message === "process started")).toMatchObject({ level: "info", fields: { pid: String(run.pid), cmd: expect.stringContaining("echo hello") } });
      expect(logs.find((e) => e.message === "process exited")).toMatchObject({ fields: { pid: String(run.pid), exitCode: "0" } });
      for (const e of logs) expect(Number.isNaN(Date.parse(e.timestamp))).toBe(false);

      const newest = await api().GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: sbx.sandboxId }, query: { direction: "backward", limit: 1 } } });
      expect(newest.data!.logs).toHaveLength(1);
      expect(newest.data!.logs[0]!.message).toBe(logs.at(-1)!.message);

      const v1 = await api().GET("/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: sbx.sandboxId }, query: { start: 0 } } });
      expect(v1.response.status).toBe(200);
      expect(v1.data!.logEntries.length).toBe(logs.length);
      expect(JSON.parse(v1.data!.logs.find((l) => l.line.includes("process exited"))!.line)).toMatchObject({ level: "info", msg: "process exited", exitCode: "0" });
    } finally {
      await sbx.kill();
    }
  });

  it("a killed sandbox's logs are still served to its team (as E2B does), and to no other team", async () => {
    const sbx = await Sandbox.create(e2b());
    const run = await sbx.commands.run("echo before-kill", { background: true });
    await run.wait();
    const ours = async (apiKey = e2b().apiKey) => {
      const res = await new ApiClient(new ConnectionConfig({ ...e2b(), apiKey })).api.GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: sbx.sandboxId }, query: { limit: 1000 } } });
      return { status: res.response.status, started: res.data?.logs.find((e) => e.message === "process started" && e.fields.cmd?.includes("echo before-kill")) };
    };
    await waitFor(async () => (await ours()).started !== undefined);
    expect(await sbx.kill()).toBe(true);
    await expect(Sandbox.getInfo(sbx.sandboxId, e2b())).rejects.toThrow();
    expect(await ours()).toMatchObject({ status: 200, started: { fields: { pid: String(run.pid) } } });
    const stranger = await fetch(`${e2b().apiUrl}/api-keys`, { method: "POST", headers: { "x-api-key": e2b().apiKey, "content-type": "application/json" }, body: JSON.stringify({ name: "stranger", teamName: uniqueTag() }) });
    const { key } = (await stranger.json()) as { key: string };
    expect((await ours(key)).status).toBe(404);
  });

  it("an unknown sandbox is 404", async () => {
    const res = await api().GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: "nosuchsandbox0000000" } } });
    expect(res.response.status).toBe(404);
  });
});
