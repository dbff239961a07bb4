// The runtime bundle's Headers (controllers/runtime/http/web-headers.ts) against Node's own, the
// standard's reference here: the same operations give the same observable state and the same
// errors. And the bundle it is injected into: Connect's code gets it, its Node adapter comes
// without node:http2, and the bundle's source stays one byte per character for V8.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebHeaders } from "../../../controllers/runtime/http/web-headers.ts";
import { bundleRuntime } from "../../../controllers/runtime/bundle.ts";

type H = InstanceType<typeof Headers> | WebHeaders;
type Op = (h: H) => unknown;

const state = (h: H) => ({
  entries: [...h],
  keys: [...h.keys()],
  values: [...h.values()],
  forEach: (() => {
    const seen: string[][] = [];
    h.forEach((v, k) => seen.push([k, v]));
    return seen;
  })(),
  cookies: h.getSetCookie(),
  tag: Object.prototype.toString.call(h),
});

function outcome(make: () => H, ops: Op[]) {
  try {
    const h = make();
    const results = ops.map((op) => {
      try {
        return { ok: op(h) ?? null };
      } catch (e) {
        return { threw: (e as Error).constructor.name };
      }
    });
    return { results, state: state(h) };
  } catch (e) {
    return { threw: (e as Error).constructor.name };
  }
}

describe("WebHeaders behaves as the platform's Headers", () => {
  const inits: [string, unknown][] = [
    ["nothing", undefined],
    ["a record", { "Content-Type": "application/json", "X-B": "  padded\t", "x-a": "1" }],
    ["pairs", [["Set-Cookie", "a=1"], ["set-cookie", "b=2"], ["Accept", "x"], ["accept", "y"]]],
    ["another Headers", new Headers([["grpc-status", "0"], ["X-Y", "z"]])],
    ["a Map", new Map([["k", "v"]])],
    ["a bad name", { "bad name": "x" }],
    ["a value with a newline", { a: "x\ny" }],
    ["a value with NUL", { a: "x\0y" }],
    ["a value above U+00FF", { a: "x\u2192y" }],
    ["a Latin-1 value", { a: "caf\u00e9" }],
    ["a pair of three", [["a", "b", "c"]]],
    ["a pair that is not a sequence", [5]],
    ["a number", 5],
  ];
  it.each(inits)("constructed from %s", (_, init) => {
    expect(outcome(() => new WebHeaders(init as never), [])).toEqual(outcome(() => new Headers(init as never), []));
  });

  const ops: Op[] = [
    (h) => h.append("Content-Type", "text/plain"),
    (h) => h.append("content-type", " charset=utf-8 "),
    (h) => h.get("CONTENT-TYPE"),
    (h) => h.has("content-type"),
    (h) => h.append("Set-Cookie", "a=1"),
    (h) => h.append("set-cookie", "b=2, c=3"),
    (h) => h.get("set-cookie"),
    (h) => h.set("X-Z", "last"),
    (h) => h.append("x-a", ""),
    (h) => h.get("x-a"),
    (h) => h.get("missing"),
    (h) => h.delete("X-Z"),
    (h) => h.has("x-z"),
    (h) => h.set("x-b", "1"),
    (h) => h.set("x-b", "2"),
    (h) => h.append("bad name", "x"),
    (h) => h.get("bad name"),
    (h) => h.set("ok", "bad\r\nvalue"),
    (h) => h.append("ok", "\u0100"),
    (h) => h.delete("@"),
    (h) => h.append("grpc-message", "caf\u00e9 %20"),
  ];
  it("after the same appends, sets, deletes and reads", () => {
    expect(outcome(() => new WebHeaders(), ops)).toEqual(outcome(() => new Headers(), ops));
  });
  it("forEach passes the headers object and thisArg", () => {
    const h = new WebHeaders({ a: "1" });
    const self = {};
    let got: unknown[] = [];
    h.forEach(function (this: unknown, v, k, parent) {
      got = [this, v, k, parent];
    }, self);
    expect(got).toEqual([self, "1", "a", h]);
  });
});

describe("the runtime bundle", () => {
  let dir: string;
  let source: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "runtime-bundle-"));
    source = readFileSync(await bundleRuntime(join(dir, "main.cjs")), "utf8");
  }, 60_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("gives Connect this Headers, not Node's (which loads undici and compiles its WebAssembly)", () => {
    expect(source).toContain("controllers/runtime/http/web-headers.ts");
    // Every `new Headers(` left in the bundle is the injected class under its bundled name.
    expect(source).not.toMatch(/[^\w.$]Headers\s*\(/);
  });

  it("takes only the server side of Connect's Node adapter, without node:http2", () => {
    // The adapter's one use of node:http2, a constant for HTTP/2 streams, comes from a stub.
    expect(source).toContain("NGHTTP2_NO_ERROR: 0");
    expect(source).toMatch(/\/\/ runtime-stub:http2-constants/);
  });

  it("is one byte per character (V8 keeps it as the source of every function)", () => {
    expect(source).not.toMatch(/[^\x00-\xff]/);
  });
});
