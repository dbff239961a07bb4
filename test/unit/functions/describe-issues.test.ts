// Validation messages name the field and the value refused, so a client sees what to fix.
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { describeIssues } from "../../../functions/body.ts";
import { NewTeamAPIKey } from "../../../schema/api/team.ts";

const messageOf = (schema: z.ZodType, value: unknown) => {
  const r = schema.safeParse(value);
  if (r.success) throw new Error("expected a refusal");
  return describeIssues(r.error, value);
};

describe("describeIssues", () => {
  it("names the field and the rejected value, reading on from a message that starts with the field's name", () => {
    const schema = z.object({ teamName: z.string().regex(/^[a-z0-9-]+$/, "teamName must be a DNS-1123 label") });
    expect(messageOf(schema, { teamName: "Bad_Name" })).toBe('teamName "Bad_Name" must be a DNS-1123 label');
  });

  it("gives nested paths, numbers, and cuts long values", () => {
    const schema = z.object({ a: z.object({ n: z.number().max(3) }), s: z.string().max(4) });
    const msg = messageOf(schema, { a: { n: 9 }, s: "x".repeat(100) });
    expect(msg).toContain("a.n 9: ");
    expect(msg).toContain(`s "${"x".repeat(64)}…": `);
  });

  it("leaves objects and missing values unquoted", () => {
    const schema = z.object({ o: z.string(), m: z.string() });
    expect(messageOf(schema, { o: { deep: 1 } })).toMatch(/^o: .*; m: /);
  });

  it("reads as the issue asked for a key's team name", () => {
    expect(messageOf(NewTeamAPIKey, { name: "k", teamName: "Bad_Name" })).toBe('teamName "Bad_Name" must be a DNS-1123 label');
  });
});
