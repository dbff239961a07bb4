// Durable Object stubs by name, one place for the routes to find them; each lives beside its
// object (durable-objects/*/stub.ts).
export { poolStub } from "../../durable-objects/pool/stub.ts";
export { sandboxGroupOf, sandboxGroupStub, sandboxStub, type SandboxHandle } from "../../durable-objects/sandbox/stub.ts";
