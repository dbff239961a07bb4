// The readings of a request path (controllers/traffic/l7/path.ts), the form sent on and rule
// paths must be written in (schema/egress/path.ts), and how every reading is judged
// (request.ts prepareRequest). Pure.
import { describe, expect, it } from "vitest";
import { readTarget } from "../../../controllers/traffic/l7/path.ts";
import type { L7Policy } from "../../../controllers/traffic/l7/policy.ts";
import { prepareRequest } from "../../../controllers/traffic/l7/request.ts";
import { SecurityProfileSpec } from "../../../schema/api/security-profile.ts";
import { SecurityProfilesSchema } from "../../../schema/protocol/messages.ts";
import { normalPath, rulePathProblem } from "../../../schema/egress/path.ts";

describe("readTarget", () => {
  // target → [what is sent, the readings judged (sent path first)]
  const read: [string, string, string[]][] = [
    ["/", "/", ["/"]],
    ["*", "*", ["*"]],
    ["/a/b?q=/../x", "/a/b?q=/../x", ["/a/b"]],
    ["/a/..", "/", ["/"]],
    // A leading run of / goes as one: a URI parser reads //x/secret as host x, path /secret.
    ["/../..//a", "/a", ["/a"]],
    ["//x/secret", "/x/secret", ["/x/secret"]],
    ["///x//secret/", "/x//secret/", ["/x//secret/", "/x//secret", "/x/secret/", "/x/secret"]],
    ["/.//x/secret", "/x/secret", ["/x/secret"]],
    ["/a b/%c3%a9", "/a%20b/%C3%A9", ["/a%20b/%C3%A9"]],
    ["/%41%2d%7E/x/.", "/A-~/x/", ["/A-~/x/", "/A-~/x"]],
    // Dot segments as RFC 3986 5.2.4 says, empty segments kept: the server is sent /x//admin.
    ["/x//..//admin", "/x//admin", ["/x//admin", "/x/admin"]],
    // S3-style keys and signed URLs: `//` and `;` kept in what is sent.
    ["/bucket//a//b;c.txt?X-Amz-Signature=a%2Fb", "/bucket//a//b;c.txt?X-Amz-Signature=a%2Fb", ["/bucket//a//b;c.txt", "/bucket/a/b;c.txt", "/bucket//a//b", "/bucket/a/b"]],
    ["/admin;x/secret", "/admin;x/secret", ["/admin;x/secret", "/admin/secret"]],
    ["/;x/admin", "/;x/admin", ["/;x/admin", "//admin", "/admin"]],
    ["/admin/", "/admin/", ["/admin/", "/admin"]],
    ["/admin;x/", "/admin;x/", ["/admin;x/", "/admin;x", "/admin/", "/admin"]],
    ["/a;x/..", "/", ["/"]],
    // Decoded twice: %2561 is %61, then a.
    ["/%2561dmin", "/%2561dmin", ["/%2561dmin", "/admin"]],
    ["/%2520x", "/%2520x", ["/%2520x", "/%20x"]],
    ["/100%25", "/100%25", ["/100%25"]],
    ["/%2525", "/%2525", ["/%2525", "/%25"]],
  ];
  it.each(read)("%s is sent as %s and judged as each reading", (target, sent, readings) => {
    const r = readTarget(target);
    expect(r).toEqual({ target: sent, path: sent.split("?")[0], readings });
  });

  // target → a word of the refusal
  const refused: [string, string][] = [
    ["a/b", "start with /"],
    ["/a#/../b", "#"],
    ["/x%2Fadmin", "slash (%2F)"],
    ["/x%5cadmin", "backslash (%5C)"],
    ["/x\\admin", "backslash"],
    ["/admin%00", "%00"],
    ["/%zz", "invalid percent-escape"],
    ["/x%", "invalid percent-escape"],
    ["/..;/admin", "dot segment with parameters"],
    ["/x/.;y/admin", "dot segment with parameters"],
    ["/x/é", "past ASCII"],
    // Escaped bytes that are not UTF-8: overlong / and ., a lone continuation byte, a surrogate.
    ["/x%C0%AF..%C0%AFadmin", "not UTF-8 (%C0%AF)"],
    ["/%C0%AE%C0%AE/admin", "not UTF-8"],
    ["/%80", "not UTF-8"],
    ["/%ED%A0%80", "not UTF-8"],
    ["/%E2%82", "not UTF-8"],
    // A second decode making a separator, NUL, bad UTF-8 or a dot segment; escapes three deep.
    ["/x%252Fadmin", "decoded twice holds an encoded slash"],
    ["/x%255Cadmin", "decoded twice holds an encoded backslash"],
    ["/x%2500", "decoded twice holds %00"],
    ["/x/%25C0%25AF", "decoded twice holds escaped bytes that are not UTF-8"],
    ["/x/%252e%252e/admin", "decoded twice has a dot segment"],
    ["/x/%252e/admin", "decoded twice has a dot segment"],
    ["/x/%252e%252e;p/admin", "decoded twice has a dot segment"],
    ["/x%2525252e", "escape of an escape of an escape"],
    ["/x%252561", "escape of an escape of an escape"],
  ];
  it.each(refused)("%s is refused (%s)", (target, why) => {
    const r = readTarget(target);
    expect(r).toHaveProperty("invalid");
    expect((r as { invalid: string }).invalid).toContain(why);
  });

  it("is idempotent on what it sends, which is its own first reading", () => {
    for (const [target] of read) {
      const once = readTarget(target) as { target: string; path: string; readings: string[] };
      expect(readTarget(once.target)).toEqual(once);
      expect(once.readings[0]).toBe(once.path);
    }
  });

  it("sends nothing a URI parser reads as a host: what it reads as the path is the path sent", () => {
    // Python's urlsplit, java.net.URI and WHATWG URL read a target starting with // as host + path.
    for (const target of ["//x/secret", "///x/secret", "/..//x/secret", "/.//x/secret", "/a/../..//x/secret", ...read.map(([t]) => t).filter((t) => t !== "*")]) {
      const r = readTarget(target) as { target: string; path: string };
      const u = new URL(r.target, "http://stand-in.test");
      expect([target, u.host, u.pathname]).toEqual([target, "stand-in.test", r.path]);
    }
  });

  it("makes 16 readings at most, however many segments carry parameters, // and escapes of escapes", () => {
    const r = readTarget(`/${"a;b/%2561//".repeat(1200)}x/`) as { readings: string[] };
    expect(r.readings).toHaveLength(16);
    expect(new Set(r.readings).size).toBe(16);
  });
});

describe("rule paths (a SecurityProfile's Prefix and Exact values)", () => {
  it("must be written in the form requests are judged in: refused with the form to write", () => {
    expect(rulePathProblem("/admin")).toBeUndefined();
    expect(rulePathProblem("/a//b;c/%C3%A9")).toBeUndefined();
    expect(rulePathProblem("/%61dmin")).toBe('path "/%61dmin" is not in the form requests are judged in (escapes of unreserved characters decoded, other escapes in upper case, no dot segments): write "/admin"');
    expect(rulePathProblem("/a%3bb")).toContain('write "/a%3Bb"');
    expect(rulePathProblem("/x/../admin")).toContain('write "/admin"');
    expect(rulePathProblem("//secret")).toContain('write "/secret"');
    expect(rulePathProblem("/a%2Fb")).toBe('path "/a%2Fb" can never match: it holds an encoded slash (%2F)');
    expect(normalPath("/%61dmin")).toEqual({ path: "/admin" });
  });

  it("are refused by the profile schema (the admin API's and the CRD's), naming the field", () => {
    const spec = (value: string) => SecurityProfileSpec.safeParse({ rules: [{ name: "r", match: [{ domains: ["x.test"], paths: [{ type: "Prefix", value }] }], actions: { block: {} } }] });
    expect(spec("/admin").success).toBe(true);
    const bad = spec("/%61dmin*");
    expect(bad.success).toBe(false);
    expect(bad.error?.issues).toEqual([expect.objectContaining({ path: ["rules", 0, "match", 0, "paths", 0, "value"], message: expect.stringContaining('write "/admin*"') })]);
    expect(spec("admin").error?.issues).toHaveLength(1);
  });

  it("stored before the rule, such a path still reaches agents (it matches nothing), rather than the whole set being dropped", () => {
    const rules = [{ name: "r", match: [{ domains: ["x.test"], paths: [{ type: "Prefix", value: "/%61dmin" }] }], actions: { block: {} } }];
    const frame = SecurityProfilesSchema.safeParse({ type: "securityProfiles", profiles: [{ team: "t", name: "old", spec: { rules }, createdAt: 1 }] });
    expect(frame.success).toBe(true);
    expect(frame.data?.profiles[0]?.spec.rules[0]?.match[0]?.paths).toEqual([{ type: "Prefix", value: "/%61dmin" }]);
  });
});

describe("prepareRequest judges every reading", () => {
  const at = (path: string) => {
    const r = readTarget(path) as { target: string; readings: string[] };
    return { host: "h.test", tls: true, allowedBy: "l4", method: "GET", path: r.target, readings: r.readings, headers: {} };
  };
  const exact: L7Policy = {
    http: [],
    mcp: [],
    profiles: [
      {
        name: "p",
        priority: 1,
        rules: [
          { name: "no-admin", match: [{ domains: ["h.test"], paths: [{ type: "Exact", value: "/admin" }] }], actions: { block: { statusCode: 403 } } },
          { name: "tools", match: [{ domains: ["h.test"], paths: [{ type: "Exact", value: "/mcp" }] }], actions: { mcpToolPolicy: { rules: [{ toolNames: ["safe"], action: "allow" }], defaultAction: "deny" } } },
        ],
      },
    ],
  };
  it("a block that matches any reading blocks", () => {
    for (const p of ["/admin", "/admin/", "/admin;x", "/%2561dmin", "/admin//", "//admin"]) expect([p, prepareRequest(exact, at(p), new Map())]).toEqual([p, { refuse: expect.objectContaining({ rule: "no-admin", status: 403 }) }]);
    expect(prepareRequest(exact, at("/admins"), new Map())).not.toHaveProperty("refuse");
  });

  it("an allow-list must allow every reading", () => {
    const allowList: L7Policy = {
      http: [
        { name: "only-x", host: "h.test", paths: ["/x", "/x/*"], action: "allow" },
        { name: "rest", host: "h.test", action: "block" },
      ],
      mcp: [],
    };
    expect(prepareRequest(allowList, at("/x/y"), new Map())).toMatchObject({ rule: "only-x" });
    // /x/%2561 passes (each reading allowed); /x;/../admin is /admin, refused as such.
    expect(prepareRequest(allowList, at("/x/%2561"), new Map())).toMatchObject({ rule: "only-x" });
    expect(prepareRequest(allowList, at("/x;/../admin"), new Map())).toMatchObject({ refuse: { rule: "rest" } });
    expect(prepareRequest(allowList, at("/y;/x"), new Map())).toMatchObject({ refuse: { rule: "rest" } });
  });

  it("refuses (400, rule path) a path whose readings get other header rewrites or credentials; builds the sent one's once", () => {
    const rewrites: L7Policy = {
      http: [{ name: "cred", host: "h.test", paths: ["/v1"], action: "allow", setHeaders: { Authorization: "Bearer ${e2b.secrets.k}" } }],
      mcp: [],
      profiles: [
        {
          name: "p",
          priority: 1,
          rules: [
            { name: "ro", match: [{ domains: ["h.test"], paths: [{ type: "Exact", value: "/admin" }] }], actions: { headerManipulation: { remove: ["authorization"] } } },
            { name: "tok", match: [{ domains: ["h.test"], paths: [{ type: "Exact", value: "/t" }] }], actions: { tokenTransformation: { type: "ApiKey", credentialRef: { secret: { name: "k" } } } } },
          ],
        },
      ],
    };
    const secrets = new Map([["k", "s3cret"]]);
    const withAuth = (p: string) => ({ ...at(p), headers: { authorization: "Bearer mine" } });
    for (const p of ["/admin/", "/admin;x", "/%2561dmin", "/v1/", "/v1;x", "/t/"]) {
      expect([p, prepareRequest(rewrites, withAuth(p), secrets)]).toEqual([p, { refuse: { status: 400, rule: "path", text: expect.stringContaining("rules that rewrite headers treat it differently") } }]);
    }
    expect(prepareRequest(rewrites, withAuth("/admin"), secrets)).toEqual({ headers: {}, rule: "ro" });
    expect(prepareRequest(rewrites, withAuth("/v1"), secrets)).toEqual({ headers: { Authorization: "Bearer s3cret" }, rule: "cred" });
    expect(prepareRequest(rewrites, withAuth("/t"), secrets)).toEqual({ headers: { authorization: "s3cret" }, rule: "tok" });
    // Readings alike in their rewrites (none) pass as they came.
    expect(prepareRequest(rewrites, withAuth("/x/;y/"), secrets)).toEqual({ headers: { authorization: "Bearer mine" }, rule: "l4" });
  });

  it("screens MCP when any reading's rules govern the endpoint; a tool passes only if each allows it", () => {
    const p = prepareRequest(exact, at("/mcp;x"), new Map()) as { mcp?: (t: string) => unknown };
    expect(p.mcp).toBeDefined();
    expect(p.mcp!("safe")).toMatchObject({ allowed: true });
    expect(p.mcp!("rm")).toMatchObject({ allowed: false, rule: "tools (defaultAction)" });
  });
});
