// The proxy's resolver for sandboxes: DNS messages in and out, which names resolve under which
// rules, and what it remembers for connections by address.
import { describe, expect, it } from "vitest";
import { buildAnswer, parseQuery, RCODE, TYPE_A, TYPE_AAAA } from "../../../controllers/traffic/dns-wire.ts";
import { compilePolicy } from "../../../controllers/traffic/policy.ts";
import { SandboxResolver } from "../../../controllers/traffic/resolver.ts";

function query(name: string, type = TYPE_A, id = 0x1234): Buffer {
  const labels = name.split(".").map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)]));
  const tail = Buffer.alloc(4);
  tail.writeUInt16BE(type, 0);
  tail.writeUInt16BE(1, 2);
  const head = Buffer.alloc(12);
  head.writeUInt16BE(id, 0);
  head.writeUInt16BE(0x0100, 2); // RD
  head.writeUInt16BE(1, 4);
  return Buffer.concat([head, ...labels, Buffer.from([0]), tail]);
}

/** rcode and the addresses of an answer (A or AAAA records, read back by offset). */
function read(answer: Buffer): { id: number; rcode: number; addresses: string[] } {
  const q = parseQuery(Buffer.concat([answer.subarray(0, 2), Buffer.from([1, 0]), answer.subarray(4)]))!;
  let at = 12 + q.raw.length;
  const addresses: string[] = [];
  for (let i = 0; i < answer.readUInt16BE(6); i++) {
    const len = answer.readUInt16BE(at + 10);
    const rdata = answer.subarray(at + 12, at + 12 + len);
    addresses.push(len === 4 ? [...rdata].join(".") : rdata.toString("hex").replace(/(.{4})(?!$)/g, "$1:"));
    at += 12 + len;
  }
  return { id: answer.readUInt16BE(0), rcode: answer.readUInt16BE(2) & 0xf, addresses };
}

describe("dns-wire", () => {
  it("reads one question and answers it with records of its type only", () => {
    const q = parseQuery(query("Api.Example.TEST", TYPE_A))!;
    expect(q).toMatchObject({ id: 0x1234, name: "api.example.test", type: TYPE_A, rd: true });
    expect(read(buildAnswer(q, RCODE.noError, ["192.0.2.1", "2001:db8::1", "192.0.2.2"]))).toEqual({ id: 0x1234, rcode: 0, addresses: ["192.0.2.1", "192.0.2.2"] });
    const q6 = parseQuery(query("api.example.test", TYPE_AAAA))!;
    expect(read(buildAnswer(q6, RCODE.noError, ["192.0.2.1", "2001:db8::1"])).addresses).toEqual(["2001:0db8:0000:0000:0000:0000:0000:0001"]);
    expect(read(buildAnswer(q, RCODE.nxDomain))).toMatchObject({ rcode: 3, addresses: [] });
  });

  it("refuses what is not one plain query: responses, cut messages, odd labels", () => {
    const response = query("a.test");
    response.writeUInt16BE(0x8100, 2);
    expect(parseQuery(response)).toBeUndefined();
    expect(parseQuery(query("a.test").subarray(0, 15))).toBeUndefined();
    expect(parseQuery(query("a b.test"))).toBeUndefined();
    expect(parseQuery(Buffer.alloc(5))).toBeUndefined();
  });
});

describe("SandboxResolver", () => {
  const looked: string[] = [];
  const resolver = new SandboxResolver(
    async (host) => {
      looked.push(host);
      if (host === "api.example.test") return ["192.0.2.10"];
      if (host === "inside.example.test") return ["10.1.2.3", "192.0.2.11"];
      if (host === "other.test") return ["192.0.2.99"];
      throw Object.assign(new Error("no"), { code: "ENOTFOUND" });
    },
    () => undefined,
  );
  const byName = compilePolicy({ allowOut: ["*.example.test"], denyOut: ["0.0.0.0/0"] });
  const byAddress = compilePolicy({ allowOut: ["192.0.2.99"], denyOut: ["0.0.0.0/0"] });

  it("answers a name the rules allow with its addresses that pass, and remembers them for the sandbox", async () => {
    const out = await resolver.answer("s1", byName, query("api.example.test"));
    expect(read(out.answer!)).toMatchObject({ rcode: 0, addresses: ["192.0.2.10"] });
    expect(resolver.namesFor("s1", "192.0.2.10")).toEqual(["api.example.test"]);
    expect(resolver.namesFor("s2", "192.0.2.10")).toEqual([]);
    // A private address is left out even for a name allowed by name (policy.ts).
    expect(read((await resolver.answer("s1", byName, query("inside.example.test"))).answer!).addresses).toEqual(["192.0.2.11"]);
  });

  it("a name no rule could admit is NXDOMAIN without a lookup; one whose addresses are all denied is NXDOMAIN too", async () => {
    looked.length = 0;
    const out = await resolver.answer("s1", byName, query("other.test"));
    expect(read(out.answer!).rcode).toBe(RCODE.nxDomain);
    expect(out.denied).toMatch(/other.test is not allowed by name/);
    expect(looked).toEqual([]);
    expect(read((await resolver.answer("s1", byAddress, query("other.test"))).answer!).addresses).toEqual(["192.0.2.99"]);
    const denied = await resolver.answer("s1", byAddress, query("api.example.test"));
    expect(read(denied.answer!).rcode).toBe(RCODE.nxDomain);
    expect(denied.denied).toMatch(/denied by denyOut "0.0.0.0\/0"/);
  });

  it("a sandbox without rules here is refused; forget drops what it was answered", async () => {
    expect(read((await resolver.answer("s3", "no rules", query("api.example.test"))).answer!).rcode).toBe(RCODE.refused);
    resolver.forget("s1");
    expect(resolver.namesFor("s1", "192.0.2.10")).toEqual([]);
  });
});
