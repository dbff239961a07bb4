// Runtime span names of RPC requests (controllers/runtime/rpc-names.ts): the matched method from a
// fixed set, never the tenant's path; the set is the services' own.
import { expect, it } from "vitest";
import { RPC_METHODS, rpcSpanName } from "../../../controllers/runtime/rpc-names.ts";
import { Filesystem } from "../../../schema/envd/gen/filesystem/filesystem_pb.js";
import { Process } from "../../../schema/envd/gen/process/process_pb.js";

it("names a span by the matched method, and any other path under an RPC prefix rpc.unknown", () => {
  expect(rpcSpanName("/process.Process/Start")).toBe("process.Process/Start");
  expect(rpcSpanName("/filesystem.Filesystem/WatchDir")).toBe("filesystem.Filesystem/WatchDir");
  for (const p of ["/process.Process/x-" + "a".repeat(200), "/process.Process/", "/filesystem.Filesystem/Stat/extra", "/process.Process/start"]) {
    expect(rpcSpanName(p)).toBe("rpc.unknown");
  }
});

it("the fixed set is exactly the served services' methods", () => {
  const served = Object.fromEntries([Process, Filesystem].map((s) => [s.typeName, s.methods.map((m) => m.name)]));
  expect(RPC_METHODS).toEqual(served);
});
