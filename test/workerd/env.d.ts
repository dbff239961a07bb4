// Types for tests running inside workerd: the main module's exports and the Worker's bindings.
declare namespace Cloudflare {
  interface GlobalProps {
    mainModule: typeof import("../../functions/index.ts");
    durableNamespaces: "SandboxGroupDO" | "PoolDO" | "ClusterDO" | "SandboxIndexDO";
  }
}
