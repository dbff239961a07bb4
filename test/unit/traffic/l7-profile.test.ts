// SecurityProfile rules for one request (profile.ts): priority order, every matching rule until a
// terminal action, bypass keeping earlier mutations and block dropping them, header set/remove,
// ApiKey token transformation from a named secret, the MCP tool policy's first match and default
// deny, and what the subset refuses.
import { describe, expect, it } from "vitest";
import { evaluateProfiles, profileToolVerdict, renderToken, unsupported, type Profile } from "../../../controllers/traffic/l7/profile.ts";

const low: Profile = {
  name: "team",
  priority: 100,
  rules: [
    { name: "tag", match: [{ domains: ["*.github.com"] }], actions: { headerManipulation: { set: [{ name: "X-Sandbox", value: "yes" }], remove: ["Cookie"] } } },
    { name: "token", match: [{ domains: ["api.github.com"], methods: ["GET", "POST"] }], actions: { tokenTransformation: { credentialRef: { secret: { name: "GH" } }, apiKey: { valueTemplate: "token {{ .apiKey }}" } } } },
    { name: "no-admin", match: [{ domains: ["api.github.com"], paths: [{ value: "/admin" }] }], actions: { block: { statusCode: 451, body: "no" } } },
    { name: "free", match: [{ domains: ["api.github.com"], paths: [{ type: "Exact", value: "/zen" }] }], actions: { bypass: true } },
  ],
};
const high: Profile = { name: "global", priority: 1000, rules: [{ name: "late", match: [{ domains: ["*"] }], actions: { headerManipulation: { set: [{ name: "x-late", value: "1" }] } } }] };

describe("SecurityProfile evaluation", () => {
  it("runs every matching rule in priority order, mutations accumulating", () => {
    const o = evaluateProfiles([high, low], "api.github.com", "get", "/repos?x=1");
    expect(o.matched).toEqual(["tag", "token", "late"]);
    expect(o.set).toEqual({ "x-sandbox": "yes", "x-late": "1" });
    expect(o.remove).toEqual(["cookie"]);
    expect(o.secretHeaders).toEqual({ authorization: ["token {{ .apiKey }}", "gh"] });
    expect(o.terminal).toBeUndefined();
    expect(renderToken("token {{ .apiKey }}", "s3")).toBe("token s3");
  });

  it("stops at block (dropping mutations) and at bypass (keeping them); path prefix and exact, apex not matched by a wildcard", () => {
    expect(evaluateProfiles([low, high], "api.github.com", "GET", "/admin/x").terminal).toEqual({ kind: "block", rule: "no-admin", status: 451, body: "no" });
    expect(evaluateProfiles([low, high], "api.github.com", "GET", "/admin/x").set).toEqual({});
    const b = evaluateProfiles([low, high], "api.github.com", "GET", "/zen");
    expect(b.terminal).toEqual({ kind: "bypass", rule: "free" });
    expect(b.set).toEqual({ "x-sandbox": "yes" });
    expect(evaluateProfiles([low], "api.github.com", "GET", "/zen/more").terminal).toBeUndefined();
    expect(evaluateProfiles([low], "github.com", "GET", "/").matched).toEqual([]);
    expect(evaluateProfiles([low], "api.github.com", "DELETE", "/").matched).toEqual(["tag"]);
  });

  it("decides MCP tools by the first matching rule, else defaultAction (deny when unset)", () => {
    const m = { rule: "mcp", policy: { rules: [{ toolNames: ["read_*"], action: "allow" as const }, { toolNames: ["rm"], action: "deny" as const }] } };
    expect(profileToolVerdict(m, "read_file")).toEqual({ allowed: true, rule: "mcp" });
    expect(profileToolVerdict(m, "rm")).toEqual({ allowed: false, rule: "mcp" });
    expect(profileToolVerdict(m, "write")).toEqual({ allowed: false, rule: "mcp (defaultAction)" });
    expect(profileToolVerdict({ rule: "open", policy: { defaultAction: "allow" } }, "x")).toEqual({ allowed: true, rule: "open (defaultAction)" });
  });

  it("names what the subset does not enforce", () => {
    expect(unsupported(low)).toBeUndefined();
    const rx = { name: "p", priority: 1, rules: [{ name: "r", match: [{ domains: ["a"], paths: [{ type: "Regex" as never, value: "(a+)+" }] }], actions: {} }] };
    expect(unsupported(rx)).toBe('rule "r": path type Regex is not supported');
    const hdr = { name: "p", priority: 1, rules: [{ name: "h", match: [{ domains: ["a"], headers: [] } as never], actions: {} }] };
    expect(unsupported(hdr)).toBe('rule "h": match on headers is not supported');
    const sts = { name: "p", priority: 1, rules: [{ name: "s", match: [{ domains: ["a"] }], actions: { tokenTransformation: { type: "AliyunSTS" as never } } }] };
    expect(unsupported(sts)).toContain("ApiKey");
  });
});
