import { DurableObject } from "cloudflare:workers";

// Placeholder so the Worker binds; the real shell lands with issue 2.
export class SandboxDO extends DurableObject {}
