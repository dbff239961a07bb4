// E2B `network.rules` with a secret, end to end: the real SDK makes a secret and a sandbox whose
// rules add it as a header for one host; curl in the sandbox (no proxy variables) reaches an HTTPS
// echo in a namespace standing in for the internet, and the echo sees the header. The sandbox
// cannot find the value: not in its environment, its files, or its processes' environments.
import { execFileSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, Secret } from "e2b";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { serveIn, startOutside, type Outside } from "../support/outside-net.ts";
import { e2b, uniqueTag } from "./sdk.ts";

const HOST = "echo.example.test";
/** Answers every GET with the request's headers, one per line; under /quiet it writes them to the
 * file argv[3] instead and answers only their names, so the sandbox never gets a value back. */
const ECHO = `
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = "".join(f"{k}: {v}\\n" for k, v in self.headers.items()).encode()
        if self.path.startswith("/quiet"):
            open(sys.argv[3], "ab").write(b)
            b = " ".join(self.headers.keys()).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("0.0.0.0", 443), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1], sys.argv[2])
s.socket = c.wrap_socket(s.socket, server_side=True)
s.serve_forever()
`;

let out: Outside;
let echo: ChildProcess;
let dir: string;
let heard: string;
const created: Sandbox[] = [];
const name = `tok-${uniqueTag()}`;
// Split so that no command sent to the sandbox carries the value whole.
const [head, tail] = [`inj${uniqueTag()}`, `secret${uniqueTag()}`];
const value = head + tail;

beforeAll(async () => {
  out = await startOutside();
  dir = mkdtempSync(join(tmpdir(), "e2e-echo-"));
  const ca = inject("outsideCa");
  const [crt, key] = [join(dir, "echo.crt"), join(dir, "echo.key")];
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", crt, "-days", "1", "-subj", `/CN=${HOST}`, "-addext", `subjectAltName=DNS:${HOST}`, "-addext", "basicConstraints=CA:FALSE", "-CA", ca.cert, "-CAkey", ca.key], { stdio: "ignore" });
  heard = join(dir, "heard");
  writeFileSync(heard, "");
  echo = await serveIn(out, 443, ["python3", "-c", ECHO, crt, key, heard]);
});

afterAll(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => false)));
  await Secret.destroy(name, e2b()).catch(() => false);
  echo?.kill("SIGKILL");
  out?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const run = async (sbx: Sandbox, cmd: string) => ((await sbx.commands.run(cmd, { timeoutMs: 300_000 }).catch((err: { stdout?: string }) => err)).stdout ?? "").trim();

describe("network.rules with a secret", () => {
  it("injects the header at the proxy; the sandbox never holds the value", async () => {
    await Secret.create(name, value, e2b());
    const sbx = await Sandbox.create({ ...e2b(), network: { rules: { [HOST]: [{ transform: { headers: { Authorization: `Bearer ${Secret.fill(name)}` } } }] } } });
    created.push(sbx);
    const curl = `env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy curl -sS -m 10 --resolve ${HOST}:443:${out.ip} https://${HOST}/ 2>&1 || echo "exit $?"`;
    const seen = await run(sbx, curl);
    expect(seen).toContain(`Authorization: Bearer ${value}`);
    // Another host: no header, and its own certificate (the sandbox's CA does not sign it).
    expect(await run(sbx, `env -u HTTPS_PROXY -u https_proxy curl -sS -m 10 -k --resolve other.example.test:443:${out.ip} https://other.example.test/ 2>&1`)).not.toContain("Authorization");

    const find = `"${head}""${tail}"`;
    expect(await run(sbx, `env | grep -c ${find} || true`)).toBe("0");
    expect(await run(sbx, `cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c ${find} || true`)).toBe("0");
    // The scan reaches the sandbox's files: a marker written to /tmp is found, the value is not.
    const marker = `"mk${tail}""${head}km"`; // not the value: its parts the other way round
    await run(sbx, `echo ${marker} > /tmp/marker.txt`);
    expect(await run(sbx, `grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -e ${find} -e ${marker.replaceAll('"', "")} /; true`)).toBe("/tmp/marker.txt");
  }, 600_000);

  it("updateNetwork with rules: a running sandbox gets them (and its CA) at its next request; omitted, they are cleared", async () => {
    const sbx = await Sandbox.create(e2b());
    created.push(sbx);
    const get = (extra = "") => run(sbx, `curl -sS -m 10 ${extra} --resolve ${HOST}:443:${out.ip} https://${HOST}/ 2>&1 || echo "exit $?"`);
    // No rules yet: the echo's own certificate, which the sandbox does not trust, and no header.
    expect(await get("-k")).not.toContain("Authorization");
    await sbx.updateNetwork({ rules: { [HOST]: [{ transform: { headers: { Authorization: `Bearer ${Secret.fill(name)}` } } }] } });
    expect(await get()).toContain(`Authorization: Bearer ${value}`);
    await sbx.updateNetwork({});
    expect(await get("-k")).not.toContain("Authorization");
  }, 600_000);

  it("a SecurityProfile's tokenTransformation: the proxy adds the team's secret; the sandbox cannot read it anywhere; global profiles run in the same order", async () => {
    const { apiUrl, apiKey, dataDir } = inject("e2b");
    const api = (path: string, method = "GET", body?: unknown) => fetch(new URL(path, apiUrl), { method, headers: { "x-api-key": apiKey, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
    const tag = uniqueTag();
    const tokName = `ptok-${tag}`;
    const [h2, t2] = [`pt${uniqueTag()}`, `val${uniqueTag()}`];
    const token = h2 + t2;
    const team = `/admin/teams/admin/security-profiles/tok-${tag}`;
    const global = `/admin/global-security-profiles/g-${tag}`;
    try {
      await Secret.create(tokName, token, e2b());
      const selector = { matchLabels: { tok: tag } };
      const match = [{ domains: [HOST] }];
      expect((await api(team, "PUT", { priority: 10, selector, rules: [{ name: "key", match, actions: { headerManipulation: { set: [{ name: "x-order", value: "team" }] }, tokenTransformation: { type: "ApiKey", targetHeader: "x-api-key", apiKey: { valueTemplate: "Token {{ .apiKey }}" }, credentialRef: { secret: { name: tokName } } } } }] })).status).toBe(200);
      const sbx = await Sandbox.create({ ...e2b(), metadata: { "label:tok": tag } });
      created.push(sbx);
      // A global profile ahead of the team's (lower priority number): its block is terminal, its header is replaced by the team's later one.
      // It selects by the platform's template and team labels, never a tenant's label (review 25 M4, 26 H2).
      const globalSelector = { matchLabels: { "agents.kruise.io/sandbox-template": (await sbx.getInfo()).templateId, "agents.kruise.io/sandbox-team": "admin" } };
      expect((await api(global, "PUT", { priority: 5, selector: globalSelector, rules: [{ name: "g-block", match: [{ domains: [HOST], paths: [{ type: "Prefix", value: "/g-blocked" }] }], actions: { block: { statusCode: 451 } } }, { name: "g-set", match, actions: { headerManipulation: { set: [{ name: "x-order", value: "global" }, { name: "x-global", value: "1" }] } } }] })).status).toBe(200);
      const get = (path: string) => run(sbx, `curl -sS -m 10 -o /dev/null -w '%{http_code}' --resolve ${HOST}:443:${out.ip} https://${HOST}${path} 2>&1 || echo " exit $?"`);
      // The agent gets the global profile after the sandbox exists: until then its block is not in force.
      for (let i = 0; i < 50 && (await get("/g-blocked/x")) !== "451"; i++) await new Promise((r) => setTimeout(r, 200));
      expect(await get("/quiet")).toBe("200");
      const seen = readFileSync(heard, "utf8");
      expect(seen).toContain(`x-api-key: Token ${token}`);
      expect(seen).toContain("x-order: team");
      expect(seen).toContain("x-global: 1");
      expect(await get("/g-blocked/x")).toBe("451");

      const find = `"${h2}""${t2}"`;
      expect(await run(sbx, `env | grep -c ${find} || true`)).toBe("0");
      expect(await run(sbx, `cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c ${find} || true`)).toBe("0");
      const marker = `"mk${t2}""${h2}km"`;
      await run(sbx, `echo ${marker} > /tmp/marker.txt`);
      expect(await run(sbx, `grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -e ${find} -e ${marker.replaceAll('"', "")} /; true`)).toBe("/tmp/marker.txt");
      // Every readable mapping of every process in the sandbox, as its root; a live process holding
      // the marker shows the scan reaches other processes' memory.
      // It says when the joined marker is in its memory (the start event comes at exec, before that).
      await sbx.commands.run(`python3 -c "import sys,time; x=sys.argv[1]+sys.argv[2]; open('/tmp/holding','w').close(); time.sleep(600)" mk${t2} ${h2}km`, { background: true, user: "root" });
      expect(await run(sbx, "for i in $(seq 100); do [ -e /tmp/holding ] && break; sleep 0.1; done; [ -e /tmp/holding ] && echo held")).toBe("held");
      const scan = `python3 -c "
import os, sys
needles = [(sys.argv[1] + sys.argv[2]).encode(), (sys.argv[3] + sys.argv[4]).encode()]
hits = [0, 0]
for pid in filter(str.isdigit, os.listdir('/proc')):
    if int(pid) == os.getpid(): continue
    try:
        maps = open(f'/proc/{pid}/maps').read().splitlines(); mem = open(f'/proc/{pid}/mem', 'rb', 0)
    except OSError: continue
    for line in maps:
        span, perms = line.split()[:2]
        if 'r' not in perms: continue
        a, b = (int(x, 16) for x in span.split('-'))
        try:
            mem.seek(a); chunk = mem.read(b - a)
        except (OSError, ValueError, OverflowError): continue
        for i, n in enumerate(needles):
            hits[i] += n in chunk
print(hits[0], hits[1] > 0)
" ${h2} ${t2} mk${t2} ${h2}km`;
      expect((await sbx.commands.run(scan, { user: "root", timeoutMs: 300_000 })).stdout.trim()).toBe("0 True");
      // Nor in what the platform keeps about the sandbox: its audit, its logs, the agent's log and files.
      expect(await (await api(`/sandboxes/${sbx.sandboxId}/network/audit`)).text()).not.toContain(token);
      expect(await (await api(`/v2/sandboxes/${sbx.sandboxId}/logs`)).text()).not.toContain(token);
      const agentFiles = execFileSync("sh", ["-c", `grep -rlF -e "$1" ${dataDir}/agent.log ${dataDir}/agent/*.json ${dataDir}/agent/network-audit ${dataDir}/agent/sandbox-logs 2>/dev/null; true`, "sh", token], { encoding: "utf8" });
      expect(agentFiles).toBe("");
      expect(existsSync(`${dataDir}/agent.log`) && existsSync(`${dataDir}/agent/network-audit`)).toBe(true);
    } finally {
      await api(team, "DELETE").catch(() => undefined);
      await api(global, "DELETE").catch(() => undefined);
      await Secret.destroy(tokName, e2b()).catch(() => false);
    }
  }, 600_000);
});
