// E2B REST shapes for API keys and teams (upstream `TeamAPIKey`, `CreatedTeamAPIKey`, `Team`).
import { z } from "zod";

export const IdentifierMaskingDetails = z.object({
  prefix: z.string(),
  valueLength: z.int(),
  maskedValuePrefix: z.string(),
  maskedValueSuffix: z.string(),
});

export const TeamAPIKey = z.object({
  id: z.string(),
  name: z.string(),
  mask: IdentifierMaskingDetails,
  createdAt: z.string(),
  createdBy: z.object({ id: z.string(), email: z.string().nullable() }).nullable().optional(),
  lastUsed: z.string().nullable().optional(),
});
export type TeamAPIKey = z.infer<typeof TeamAPIKey>;

export const CreatedTeamAPIKey = TeamAPIKey.extend({ key: z.string() });

/** Team names are Kubernetes namespaces: DNS-1123 labels, and no `--` (OpenKruise ids use it). */
export const TeamName = z
  .string()
  .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, "teamName must be a DNS-1123 label")
  .refine((n) => !n.includes("--"), "teamName must not contain --");

/** `POST /api-keys`. `teamName` is admin-only and creates the team when missing. */
export const NewTeamAPIKey = z.strictObject({ name: z.string().min(1).max(128), teamName: TeamName.optional() });

export const Team = z.object({ teamID: z.string(), name: z.string(), apiKey: z.string(), isDefault: z.boolean() });
