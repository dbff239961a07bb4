// The Worker's bindings as seen by `env` from "cloudflare:workers" in tests.
type WorkerBindings = import("../../functions/env.ts").Env;
declare namespace Cloudflare {
  interface Env extends WorkerBindings {}
}
