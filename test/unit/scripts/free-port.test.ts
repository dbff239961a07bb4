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

  it("never hands the same port out twice in a process, one call after another or at once", async () => {
    // Nothing listens on them meanwhile, as when startSystem picks several ports in a row: each
    // is free again when the next call checks, so only the process's own record keeps them apart.
    // 1,000 random picks from the ~17k ports outside the ephemeral range would otherwise all but
    // surely collide (by the birthday bound, the chance of none is about e^-29).
    const ports: number[] = [];
    for (let i = 0; i < 1000; i++) ports.push(await freePort());
    ports.push(...(await Promise.all(Array.from({ length: 100 }, () => freePort()))));
    expect(new Set(ports).size).toBe(ports.length);
  });
});
