// Shapes of the team↔cluster bindings (admin API `/admin/teams/{team}/clusters`).
import { z } from "zod";
import { CLUSTER_ID } from "../protocol/cluster-token.ts";

/** A cluster's name as its agent links with it (and as a template's `spec.cluster` names it). */
export const ClusterId = z.string().regex(CLUSTER_ID, "cluster names are 1-63 of [a-z0-9-]");

export const TeamClusterBinding = z.object({ team: z.string(), cluster: z.string(), createdAt: z.string() });
export type TeamClusterBinding = z.infer<typeof TeamClusterBinding>;

/** `GET /admin/teams/{team}/clusters`. */
export const TeamClusterList = z.object({ team: z.string(), clusters: z.array(TeamClusterBinding) });
