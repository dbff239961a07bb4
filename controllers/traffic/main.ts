// traffic-proxy standalone: one sandbox's egress proxy, e.g. a sidecar in the sandbox's pod
// (see README.md). The sandbox's processes use it through HTTP_PROXY / HTTPS_PROXY.
//   node controllers/traffic/main.ts [--listen 127.0.0.1:3128]
//        [--policy-file /etc/traffic/policy.json | --policy '{"allowOut":[...],"denyOut":[...]}']
// Env: TRAFFIC_PROXY_POLICY (the JSON, when neither flag is given). The policy is E2B's
// `{allowOut, denyOut}`; none at all means nothing is restricted, but loopback and link-local
// are refused whatever it says (host-reach.ts, `refuseLocal`). SIGHUP re-reads --policy-file
// (a refused file keeps the rules in force and says why on stderr) and ends the open
// connections the new rules deny.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { EgressPolicySchema } from "../../schema/protocol/egress.ts";
import { compilePolicy, type CompiledPolicy } from "./policy.ts";
import { TrafficProxy } from "./proxy.ts";

const { values } = parseArgs({
  options: {
    listen: { type: "string", default: "127.0.0.1:3128" },
    "policy-file": { type: "string" },
    policy: { type: "string" },
  },
});

/** The rules from the flags or the environment; throws with a readable reason. */
function loadPolicy(): CompiledPolicy {
  const file = values["policy-file"];
  const text = file ? readFileSync(file, "utf8") : (values.policy ?? process.env.TRAFFIC_PROXY_POLICY ?? "{}");
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new Error(`${file ?? "policy"}: not JSON (${(err as Error).message})`);
  }
  const parsed = EgressPolicySchema.safeParse(json);
  if (!parsed.success) throw new Error(`${file ?? "policy"}: ${parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ")}`);
  return compilePolicy(parsed.data);
}

const listen = /^(.*):(\d{1,5})$/.exec(values.listen);
if (!listen) {
  console.error(`traffic-proxy: --listen wants HOST:PORT, not ${values.listen}`);
  process.exit(2);
}
let policy: CompiledPolicy;
try {
  policy = loadPolicy();
} catch (err) {
  console.error(`traffic-proxy: ${(err as Error).message}`);
  process.exit(2);
}
if (values["policy-file"]) {
  process.on("SIGHUP", () => {
    try {
      policy = loadPolicy();
      const ended = proxy.revalidate("");
      console.error(`traffic-proxy: policy reloaded${ended ? `, ${ended} open connection(s) it denies ended` : ""}`);
    } catch (err) {
      console.error(`traffic-proxy: policy not reloaded, the previous rules stay: ${(err as Error).message}`);
    }
  });
}
const proxy = new TrafficProxy({ policyFor: () => policy, log: (line) => console.error(line) });
const host = listen[1]!.replace(/^\[(.*)\]$/, "$1");
const port = await proxy.listenTcp(Number(listen[2]), host);
console.log(`traffic-proxy listening on ${host}:${port}`);
