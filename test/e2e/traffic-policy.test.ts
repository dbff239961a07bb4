// TrafficPolicy / GlobalTrafficPolicy end to end, for a deployment without Kubernetes: set through
// the edge's admin API, sent to the agent, enforced on a sandbox the real e2b SDK made (selected by
// its `label:<k>` metadata; a global one by its template's platform label) for every connection, without proxy variables; status lists the
// sandbox, and the agent's /metrics counts the refusal by what refused it. Namespaces on this
// machine stand in for the internet (outside-net.ts).
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { scrape, value } from "../support/prometheus-text.ts";
import { startOutside, type Outside } from "../support/outside-net.ts";
import { e2b, sleep, uniqueTag } from "./sdk.ts";

let a: Outside;
let b: Outside;
const tag = uniqueTag();
const created: Sandbox[] = [];
const paths: string[] = [];

function admin(path: string, method = "GET", body?: unknown): Promise<Response> {
  const { apiUrl, apiKey } = inject("e2b");
  return fetch(new URL(path, apiUrl), { method, headers: { "x-api-key": apiKey, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
}

beforeAll(async () => {
  a = await startOutside();
  b = await startOutside();
});

afterAll(async () => {
  await Promise.all(paths.map((p) => admin(p, "DELETE").catch(() => undefined)));
  await Promise.all(created.map((s) => s.kill().catch(() => false)));
  a?.stop();
  b?.stop();
});

const run = async (sbx: Sandbox, cmd: string) => ((await sbx.commands.run(cmd).catch((err: { stdout?: string }) => err)).stdout ?? "").trim();
/** curl with no proxy variables at all: only the redirect in the sandbox's namespace can govern it.
 * 15 s: a 5 s limit timed out once on a loaded machine (the first connection of a new sandbox). */
const curl = (sbx: Sandbox, ip: string) => run(sbx, `env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy curl -s -m 15 http://${ip}/ || echo "exit $?"`);

describe("TrafficPolicies through the admin API", () => {
  it("govern the sandboxes they select, every connection, with the refusing rule named and counted", async () => {
    const sbx = await Sandbox.create({ ...e2b(), metadata: { "label:tp": tag } });
    created.push(sbx);
    const bystander = await Sandbox.create(e2b());
    created.push(bystander);
    expect(await curl(sbx, b.ip)).toBe(`outside saw ${b.hostIp}`);

    const team = `/admin/teams/admin/traffic-policies/open-a-${tag}`;
    const global = `/admin/global-traffic-policies/deny-${tag}`;
    const byLabel = `/admin/global-traffic-policies/label-${tag}`;
    paths.push(team, global, byLabel);
    const selector = { matchLabels: { tp: tag } };
    expect((await admin(team, "PUT", { priority: 5, selector, egress: { rules: [{ action: "allow", to: [{ cidr: a.ip }], ports: [{ port: 80 }] }] } })).status).toBe(200);
    // A global policy sees only the platform's labels (review 25 M4): the tenant's `tp` selects nothing.
    const tenants = await admin(byLabel, "PUT", { selector, egress: { rules: [{ action: "reject", to: [{ cidr: a.ip }] }] } });
    expect(((await tenants.json()) as { status: { selectedSandboxes: string[] } }).status.selectedSandboxes).toEqual([]);
    // The template's label does, with the team's (by template alone it is refused: any team may
    // name a template so, review 26 H2): both sandboxes (this file's only ones) are of it.
    const template = (await sbx.getInfo()).templateId;
    expect((await admin(global, "PUT", { selector: { matchLabels: { "agents.kruise.io/sandbox-template": template } }, egress: { rules: [] } })).status).toBe(400);
    const put = await admin(global, "PUT", { selector: { matchLabels: { "agents.kruise.io/sandbox-template": template, "agents.kruise.io/sandbox-team": "admin" } }, egress: { rules: [{ action: "reject", to: [{ cidr: b.ip }] }, { action: "allow", to: [{ cidr: "0.0.0.0/0" }] }] } });
    expect(put.status).toBe(200);
    expect(((await put.json()) as { status: { selectedSandboxes: string[] } }).status.selectedSandboxes).toEqual([sbx.sandboxId, bystander.sandboxId].sort());

    const before = value(await scrape(inject("e2b").metricsUrl), "sandbox_egress_denied_total", { source: "GlobalTrafficPolicy" });
    // The agent moves the sandbox behind the proxy when the policies arrive.
    let out = "";
    for (let i = 0; i < 50 && !out.includes("denied"); i++, await sleep(200)) out = await curl(sbx, b.ip);
    expect(out).toBe(`traffic-proxy: egress denied: GlobalTrafficPolicy deny-${tag} rule 1 (reject)`);
    // label-${tag} (reject a) does not apply: the team's allow decides.
    expect(await curl(sbx, a.ip)).toBe(`outside saw ${a.hostIp}`);
    expect(value(await scrape(inject("e2b").metricsUrl), "sandbox_egress_denied_total", { source: "GlobalTrafficPolicy" })).toBeGreaterThan(before);
    // The bystander has no tenant label, and the template's global policy governs it too.
    out = "";
    for (let i = 0; i < 50 && !out.includes("denied"); i++, await sleep(200)) out = await curl(bystander, b.ip);
    expect(out).toBe(`traffic-proxy: egress denied: GlobalTrafficPolicy deny-${tag} rule 1 (reject)`);
    expect(await curl(bystander, a.ip)).toBe(`outside saw ${a.hostIp}`);

    // Deleted: the sandbox has its internet access back.
    expect((await admin(global, "DELETE")).status).toBe(204);
    expect((await admin(byLabel, "DELETE")).status).toBe(204);
    expect((await admin(team, "DELETE")).status).toBe(204);
    for (let i = 0; i < 50 && out !== `outside saw ${b.hostIp}`; i++, await sleep(200)) out = await curl(sbx, b.ip);
    expect(out).toBe(`outside saw ${b.hostIp}`);
  });
});
