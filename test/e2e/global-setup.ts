// Starts the whole system once for the e2e tier, exactly as `npm start` does (sqld, the edge on
// workerd, the agent with the local driver, a seeded admin key and `base` template), and hands the
// tests the three values a user would export.
import { execFileSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { startSystem } from "../../scripts/lib/system.ts";
import { RootfsStore } from "../../controllers/drivers/local/rootfs/store.ts";

declare module "vitest" {
  export interface ProvidedContext {
    e2b: { apiUrl: string; apiKey: string; dataDir: string; isolation: string; metricsUrl: string };
    /** The CA of the HTTPS stand-ins "on the internet" (outside-net.ts), which the agent trusts
     * as it would a public CA (NODE_EXTRA_CA_CERTS). */
    outsideCa: { cert: string; key: string };
    /** A host file the agent inherited as a careless supervisor would hand it one (no
     * close-on-exec): no sandbox process may hold it. */
    agentInherited: string;
  }
}

export default async function setup(project: TestProject) {
  const dataDir = mkdtempSync(join(tmpdir(), "sbx-e2e-"));
  const outsideCa = { cert: join(dataDir, "outside-ca.crt"), key: join(dataDir, "outside-ca.key") };
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", outsideCa.key, "-out", outsideCa.cert, "-days", "2", "-subj", "/CN=e2e outside CA"], { stdio: "ignore" });
  process.env.NODE_EXTRA_CA_CERTS = outsideCa.cert; // read by the agent at its start
  // code-interpreter through the edge's build API, as npm start does (the global setup before warmed its layers).
  // A freed built image is kept 2 s for creates under way (5 minutes by default): the tests see
  // rebuilds and deletes free it, through the ClusterDO's alarm.
  const agentInherited = join(dataDir, "host-file-the-agent-inherited");
  const inheritedFd = openSync(agentInherited, "w");
  const sys = await startSystem({ dataDir, baseReplicas: 3, codeInterpreterReplicas: 0, edgeVars: { IMAGE_FREE_GRACE_MS: "2000" }, agentInheritedFd: inheritedFd });
  project.provide("e2b", { apiUrl: sys.apiUrl, apiKey: sys.apiKey, dataDir, isolation: sys.isolation, metricsUrl: sys.metricsUrl });
  project.provide("outsideCa", outsideCa);
  project.provide("agentInherited", agentInherited);
  return async () => {
    // The rootfs records of the system's own code-interpreter builds leave the shared store (their
    // layers stay: the tiers' setup made and names them as `code-interpreter`).
    const built = await fetch(`${sys.apiUrl}/templates/code-interpreter`, { headers: { "x-api-key": sys.apiKey } }).then((r) => (r.ok ? (r.json() as Promise<{ builds: { buildID: string }[] }>) : { builds: [] }));
    await sys.stop();
    closeSync(inheritedFd);
    for (const b of built.builds) rmSync(join(new RootfsStore().root, "templates", `b-${b.buildID}.json`), { force: true });
    rmSync(dataDir, { recursive: true, force: true });
  };
}
