// A stand-in for the Kubernetes API server on loopback that takes status PATCHes of one path:
// the first is held open and never answered (a stream hung on the pooled HTTP/2 session), every
// later one is answered with `answer(body)`. For the tests of the agent's status writers' bound.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";

export interface HeldPatchServer {
  readonly kc: KubeConfig;
  /** The PATCH bodies received, in order, with when each came. */
  readonly patches: { at: number; body: { status?: Record<string, unknown> } }[];
  close(): Promise<void>;
}

export async function holdFirstPatch(path: string, answer: (body: { status?: object }) => object): Promise<HeldPatchServer> {
  const patches: HeldPatchServer["patches"] = [];
  const held: ServerResponse[] = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let raw = "";
    req.on("data", (c: Buffer) => (raw += c));
    req.on("end", () => {
      if (req.method !== "PATCH" || req.url?.split("?")[0] !== path) return res.writeHead(404).end();
      const body = JSON.parse(raw) as { status?: Record<string, unknown> };
      patches.push({ at: Date.now(), body });
      if (patches.length === 1) return held.push(res); // never answered
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer(body)));
    });
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const kc = new KubeConfig();
  kc.loadFromOptions({
    // Plain HTTP on loopback, which client-node allows only with skipTLSVerify.
    clusters: [{ name: "c", server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true }],
    users: [{ name: "agent", token: "t" }],
    contexts: [{ name: "x", cluster: "c", user: "agent" }],
    currentContext: "x",
  });
  return {
    kc,
    patches,
    async close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise((ok) => server.close(ok));
    },
  };
}
