// freePort picks ports the servers a test starts are then told to listen on (sqld, workerd, the
// agent's ingress and metrics): outside the kernel's ephemeral range, where no process's outgoing
// connection can take one between the pick and the listen (the agent died with EADDRINUSE in CI).
import { createServer } from "node:net";
import { once } from "node:events";
import { describe, expect, it } from "vitest";
import { ephemeralPorts, freePort } from "../../../scripts/lib/sqld.ts";

describe("freePort", () => {
  it("picks ports outside the ephemeral range that can be listened on", async () => {
    const { low, high } = ephemeralPorts();
    for (let i = 0; i < 20; i++) {
      const port = await freePort();
      expect(port >= low && port <= high, `${port} is in the ephemeral range ${low}-${high}`).toBe(false);
      const srv = createServer().listen(port, "127.0.0.1");
      await once(srv, "listening");
      srv.close();
    }
  });
});
