// A record key `__proto__` in a body (review24 edge F12): JSON.parse keeps it as an own key, but a
// record built by assignment sets the prototype instead, so the entry vanished behind a 2xx. Every
// tenant record refuses it with a 400 naming it; other keys of the same shape are stored.
import { beforeAll, describe, expect, it } from "vitest";
import { call, createTeam, expectError, expectStatus, startAgent, unique, type TestTeam } from "../helpers.ts";

let team: TestTeam;

beforeAll(async () => {
  team = await createTeam(unique("reckeys"), { replicas: 1 });
  const agent = await startAgent(team.cluster);
  await agent.waitUntil(() => agent.running().length >= 1);
});

/** `{"<field>": {"__proto__": "x"}}` and the rest of `body`, as raw JSON (a JS literal would set the prototype). */
const withProto = (field: string, body: Record<string, unknown>) => JSON.stringify(body).replace(/^\{/, `{${JSON.stringify(field)}:{"__proto__":"x"},`);

describe("a record key __proto__", () => {
  it("is a 400 naming it in a sandbox's metadata and env vars, and in a secret's metadata on create and update", async () => {
    const sandbox = { templateID: team.template };
    await expectError(call("/v2/sandboxes", { key: team.key, raw: withProto("metadata", sandbox) }), 400, /__proto__/);
    await expectError(call("/v2/sandboxes", { key: team.key, raw: withProto("envVars", sandbox) }), 400, /__proto__/);
    await expectError(call("/secrets", { key: team.key, raw: withProto("metadata", { name: unique("s"), value: "v" }) }), 400, /__proto__/);
    const secret = await expectStatus(call("/secrets", { key: team.key, body: { name: unique("s"), value: "v" } }), 201);
    await expectError(call(`/secrets/${secret.secretID}`, { key: team.key, raw: withProto("metadata", { value: "w" }) }), 400, /__proto__/);
  });

  it("leaves keys like it stored: constructor, __proto, proto__", async () => {
    const metadata = { constructor: "a", __proto: "b", proto__: "c" };
    const sbx = await expectStatus(call("/v2/sandboxes", { key: team.key, body: { templateID: team.template, metadata } }), 201);
    expect((await expectStatus(call(`/sandboxes/${sbx.sandboxID}`, { key: team.key }), 200)).metadata).toMatchObject(metadata);
    const secret = await expectStatus(call("/secrets", { key: team.key, body: { name: unique("s"), value: "v", metadata } }), 201);
    expect(secret.metadata).toEqual(metadata);
  });
});
