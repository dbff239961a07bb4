import { Hono } from "hono";
export { SandboxDO } from "../durable-objects/sandbox/sandbox-do.ts";
export { PoolDO } from "../durable-objects/pool/pool-do.ts";
export { ClusterDO } from "../durable-objects/cluster/cluster-do.ts";

const app = new Hono();
app.get("/health", (c) => c.json({ ok: true }));
export default app;
