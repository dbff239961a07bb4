// User labels and annotations of a sandbox's cluster objects: the key and value syntax the API
// server enforces, the reserved agents.kruise.io prefixes, and how E2B create metadata splits
// into them (functions/api/extensions.ts).
import { describe, expect, it } from "vitest";
import { parseCreateExtensions } from "../../../schema/api/extensions.ts";
import {
  annotationsProblem,
  isLabelValue,
  isQualifiedName,
  isReservedKey,
  labelProblem,
  USER_ANNOTATION_BYTES,
  userAnnotations,
} from "../../../schema/crd/user-metadata.ts";

describe("key and value syntax", () => {
  it("qualified names: [DNS subdomain/]name, name at most 63, alphanumeric at both ends", () => {
    for (const ok of ["a", "owner", "team.example/owner", "example.com/a_b-c.d", "A9", "x".repeat(63), `${"a".repeat(253)}/n`]) expect(isQualifiedName(ok), ok).toBe(true);
    for (const bad of ["", "user id", "label:tier", "-a", "a-", "/a", "a/", "a/b/c", "Example.com/a", "x".repeat(64), `${"a".repeat(254)}/n`, "a..b/c", "é"]) expect(isQualifiedName(bad), bad).toBe(false);
  });

  it("label values: empty or at most 63, alphanumeric at both ends", () => {
    for (const ok of ["", "gold", "a.b_c-d", "v".repeat(63)]) expect(isLabelValue(ok), ok).toBe(true);
    for (const bad of ["v".repeat(64), "a b", "-a", "a/b", "ü"]) expect(isLabelValue(bad), bad).toBe(false);
  });

  it("every *.agents.kruise.io/ prefix is reserved, nothing else", () => {
    for (const k of ["agents.kruise.io/owner", "e2b.agents.kruise.io/image", "security.agents.kruise.io/agent-name"]) expect(isReservedKey(k), k).toBe(true);
    for (const k of ["owner", "kruise.io/x", "myagents.kruise.io/x", "example.com/agents.kruise.io"]) expect(isReservedKey(k), k).toBe(false);
  });

  it("says what is wrong with a label or a set of annotations", () => {
    expect(labelProblem("tier", "gold")).toBeUndefined();
    expect(labelProblem("bad key", "v")).toMatch(/not a valid label name/);
    expect(labelProblem("agents.kruise.io/sandbox-id", "x")).toMatch(/reserved/);
    expect(labelProblem("tier", "x".repeat(64))).toMatch(/not a valid label value/);
    expect(annotationsProblem({ owner: "anything at all: ünïcode, spaces, / and =" })).toBeUndefined();
    expect(annotationsProblem({ "bad key": "v" })).toMatch(/not a valid annotation key/);
    expect(annotationsProblem({ "agents.kruise.io/edge-generation": "9" })).toMatch(/reserved/);
    expect(annotationsProblem({ big: "x".repeat(USER_ANNOTATION_BYTES) })).toMatch(/at most/);
  });

  it("userAnnotations keeps only what the driver may write", () => {
    expect(userAnnotations({ owner: "ci", "agents.kruise.io/edge-generation": "9", "e2b.agents.kruise.io/x": "y", "user id": "v", "example.com/n": "" })).toEqual({
      owner: "ci",
      "example.com/n": "",
    });
    expect(Object.keys(userAnnotations({ a: "x".repeat(USER_ANNOTATION_BYTES - 10), b: "x".repeat(100) }))).toEqual(["a"]);
  });
});

describe("E2B create metadata → labels and annotations", () => {
  it("label:<k> is a label, a key that is a valid annotation key an annotation, any other key metadata only", () => {
    const ext = parseCreateExtensions({ "label:tier": "gold", owner: "ci", "example.com/run": "42", "user id": "a&b=c", "e2b.agents.kruise.io/never-timeout": "true" });
    expect(ext.labels).toEqual({ tier: "gold" });
    expect(ext.annotations).toEqual({ owner: "ci", "example.com/run": "42" });
    expect(ext.metadata).toEqual({ "label:tier": "gold", owner: "ci", "example.com/run": "42", "user id": "a&b=c" });
  });

  it("refuses a label the API server would refuse, reserved keys, and annotations over the budget", () => {
    expect(() => parseCreateExtensions({ "label:tier": "x".repeat(64) })).toThrow(/not a valid label value/);
    expect(() => parseCreateExtensions({ "label:bad key": "v" })).toThrow(/not a valid label name/);
    expect(() => parseCreateExtensions({ "label:agents.kruise.io/sandbox-claimed": "true" })).toThrow(/reserved/);
    expect(() => parseCreateExtensions({ "agents.kruise.io/edge-generation": "1" })).toThrow(/reserved/);
    expect(() => parseCreateExtensions({ "security.agents.kruise.io/agent-name": "a" })).toThrow(/reserved/);
    expect(() => parseCreateExtensions({ a: "x".repeat(USER_ANNOTATION_BYTES / 2), b: "x".repeat(USER_ANNOTATION_BYTES / 2) })).toThrow(/annotations take \d+ bytes/);
  });
});
