// traffic-proxy standalone: one sandbox's egress proxy, e.g. a sidecar in the sandbox's pod
// (see README.md). The sandbox's processes use it through HTTP_PROXY / HTTPS_PROXY, or, in a pod
// of the kubernetes driver, without knowing: the pod's nft rules bring every connection to it.
//   node controllers/traffic/main.ts [--listen 127.0.0.1:3128]
//        [--policy-file /etc/traffic/policy.json | --policy '{"allowOut":[...],"denyOut":[...]}'
//         | --pod-policy /etc/sandbox-traffic/policy.json]
//        [--transparent-fd 3] [--dns 127.0.0.1:15053] [--health 0.0.0.0:15021] [--uid 1337]
//        [--secret-dir /etc/sandbox-traffic-secret]
// Env: TRAFFIC_PROXY_POLICY (the JSON, when no flag names a policy). The policy is E2B's
// `{allowOut, denyOut}`; none at all means nothing is restricted, but loopback and link-local
// are refused whatever it says (host-reach.ts, `refuseLocal`). SIGHUP re-reads --policy-file
// (a refused file keeps the rules in force and says why on stderr) and ends the open
// connections the new rules deny.
// `--pod-policy`: the pod's ConfigMap file (schema/protocol/pod-traffic.ts: E2B rules and the
// TrafficPolicies selecting the sandbox), re-read when it changes (the kubelet swaps it), with the
// same keep-the-last-good rule. `--transparent-fd`: the TPROXY listener transparent.pl opened;
// `--dns`: where the pod's UDP port 53 is redirected (controllers/drivers/kubernetes/traffic-pod.ts);
// `--health`: `GET /ready` answers 200 once every listener is up (the kubelet's probes); `GET /audit`
// hands the L7 audit records kept since the last pull to the agent (audit-buffer.ts: only with the
// pull token of `--secret-dir`'s `audit.token`).
// `--secret-dir`: the pod's Secret (its CA, the secret values and `l7.json`, pod-l7.ts): with
// `--pod-policy`, the SecurityProfiles and `network.rules` in `l7.json` are enforced on the
// redirected path.
// `--uid`: started as root by transparent.pl, the proxy becomes this uid before it reads anything
// (drop-root.ts says why here and not in the launcher).
import { readFileSync, watchFile } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { EgressPolicySchema } from "../../schema/protocol/egress.ts";
import { PodTrafficPolicySchema } from "../../schema/protocol/pod-traffic.ts";
import { AUDIT_TOKEN_FILE, POD_AUDIT_PATH } from "../../schema/protocol/pod-audit.ts";
import { AuditBuffer } from "./audit-buffer.ts";
import type { AuditRecord } from "./l7/handler.ts";
import { TrafficPolicySet, type Governance } from "./governed.ts";
import { dropRoot } from "./drop-root.ts";
import { compilePolicy, type CompiledPolicy } from "./policy.ts";
import { L7_FILE, PodL7, SECRETS_FILE } from "./pod-l7.ts";
import { TrafficProxy } from "./proxy.ts";

const { values } = parseArgs({
  options: {
    listen: { type: "string", default: "127.0.0.1:3128" },
    "policy-file": { type: "string" },
    policy: { type: "string" },
    "pod-policy": { type: "string" },
    "transparent-fd": { type: "string" },
    dns: { type: "string" },
    health: { type: "string" },
    uid: { type: "string" },
    "secret-dir": { type: "string" },
  },
});
if (values.uid !== undefined) dropRoot(values.uid);

function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new Error(`${what}: not JSON (${(err as Error).message})`);
  }
}

function issues(what: string, error: { issues: { path: PropertyKey[]; message: string }[] }): Error {
  return new Error(`${what}: ${error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ")}`);
}

/** The rules from the flags or the environment; throws with a readable reason. */
function loadPolicy(): CompiledPolicy {
  const file = values["policy-file"];
  const text = file ? readFileSync(file, "utf8") : (values.policy ?? process.env.TRAFFIC_PROXY_POLICY ?? "{}");
  const parsed = EgressPolicySchema.safeParse(parseJson(text, file ?? "policy"));
  if (!parsed.success) throw issues(file ?? "policy", parsed.error);
  return compilePolicy(parsed.data);
}

/** The pod's file: E2B's rules compiled, and what the TrafficPolicies in it decide (if any select). */
function loadPodPolicy(file: string): { policy: CompiledPolicy; governance: Governance | undefined } {
  const parsed = PodTrafficPolicySchema.safeParse(parseJson(readFileSync(file, "utf8"), file));
  if (!parsed.success) throw issues(file, parsed.error);
  const p = parsed.data;
  const set = new TrafficPolicySet();
  set.replace(p.trafficPolicies);
  const loaded = { policy: compilePolicy(p.egress ?? { allowOut: [], denyOut: [] }), governance: set.governing(p.team, p.labels, p.egress) };
  // L7 last: a file refused above leaves every layer on the previous rules, not the L7 half on the new ones.
  podL7.update(p);
  return loaded;
}

function hostPort(flag: string, value: string): { host: string; port: number } {
  const m = /^(.*):(\d{1,5})$/.exec(value);
  if (!m) {
    console.error(`traffic-proxy: ${flag} wants HOST:PORT, not ${value}`);
    process.exit(2);
  }
  return { host: m[1]!.replace(/^\[(.*)\]$/, "$1"), port: Number(m[2]) };
}

const listen = hostPort("--listen", values.listen);
const auditBuffer = new AuditBuffer(values["secret-dir"] ? join(values["secret-dir"], AUDIT_TOKEN_FILE) : undefined);
const audit = (r: AuditRecord) => {
  auditBuffer.add(r);
  console.log(`audit ${JSON.stringify(r)}`);
};
const podL7 = new PodL7({ ...(values["secret-dir"] ? { secretDir: values["secret-dir"] } : {}), log: (line) => console.error(line), audit });
const podFile = values["pod-policy"];
let policy: CompiledPolicy;
let governance: Governance | undefined;
const load = () => (podFile ? loadPodPolicy(podFile) : { policy: loadPolicy(), governance: undefined });
try {
  ({ policy, governance } = load());
} catch (err) {
  console.error(`traffic-proxy: ${(err as Error).message}`);
  process.exit(2);
}
const reload = () => {
  try {
    ({ policy, governance } = load());
    const ended = proxy.revalidate("");
    console.error(`traffic-proxy: policy reloaded${ended ? `, ${ended} open connection(s) it denies ended` : ""}`);
  } catch (err) {
    console.error(`traffic-proxy: policy not reloaded, the previous rules stay: ${(err as Error).message}`);
  }
};
if (values["policy-file"] || podFile) process.on("SIGHUP", reload);
// A ConfigMap volume changes by a symlink swap; stat follows it, so mtime/ino show the new file.
const changed = (now: { mtimeMs: number; ino: number }, before: { mtimeMs: number; ino: number }) => now.mtimeMs !== before.mtimeMs || now.ino !== before.ino;
if (podFile) watchFile(podFile, { interval: 1000 }, (now, before) => changed(now, before) && reload());
// The Secret's files: a new l7.json also ends the open connections its rules deny, as a new policy file does.
const reloadSecret = (file: string) => (podL7.reloadSecrets(), file === L7_FILE && proxy.revalidate(""));
for (const f of podFile && values["secret-dir"] ? [SECRETS_FILE, L7_FILE] : []) watchFile(`${values["secret-dir"]}/${f}`, { interval: 1000 }, (now, before) => changed(now, before) && reloadSecret(f));
const proxy = new TrafficProxy({ policyFor: () => policy, governed: () => governance, log: (line) => console.error(line), ...(podFile ? { l7: podL7.handler } : {}) });
const port = await proxy.listenTcp(listen.port, listen.host);
console.log(`traffic-proxy listening on ${listen.host}:${port}`);
if (values["transparent-fd"]) {
  const fd = Number(values["transparent-fd"]);
  await proxy.listenTransparent(fd);
  console.log(`traffic-proxy: transparent listener on fd ${fd}`);
}
if (values.dns) {
  const dns = hostPort("--dns", values.dns);
  await proxy.listenDns(dns.port, dns.host);
  console.log(`traffic-proxy: DNS on ${dns.host}:${dns.port}/udp`);
}
if (values.health) {
  const health = hostPort("--health", values.health);
  // Only after the listeners: a pod is Ready once its sandbox's connections have somewhere to go.
  // Also the agent's pull of the audit records (audit-buffer.ts: its token only).
  createServer((req, res) => (req.url === POD_AUDIT_PATH ? auditBuffer.serve(req, res) : res.writeHead(req.url === "/ready" ? 200 : 404).end())).listen(health.port, health.host);
  console.log(`traffic-proxy: health on ${health.host}:${health.port}`);
}
