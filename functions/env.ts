// The Hono context every sub-app shares. The bindings (`Env`) and the caller live in
// durable-objects/env.ts, beneath the routes, because operations and objects use them too.
import type { Caller, Env } from "../durable-objects/env.ts";

export type { Caller, Env };

export interface AppEnv {
  Bindings: Env;
  Variables: { caller: Caller };
}
