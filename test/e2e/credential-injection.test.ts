// E2B `network.rules` with a secret, end to end: the real SDK makes a secret and a sandbox whose
// rules add it as a header for one host; curl in the sandbox (no proxy variables) reaches an HTTPS
// echo in a namespace standing in for the internet, and the echo sees the header. The sandbox
// cannot find the value: not in its environment, its files, or its processes' environments.
import { execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, Secret } from "e2b";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { serveIn, startOutside, type Outside } from "../support/outside-net.ts";
import { e2b, uniqueTag } from "./sdk.ts";

const HOST = "echo.example.test";
/** Answers every GET with the request's headers, one per line. */
const ECHO = `
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = "".join(f"{k}: {v}\\n" for k, v in self.headers.items()).encode()
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
  echo = await serveIn(out, 443, ["python3", "-c", ECHO, crt, key]);
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
});
