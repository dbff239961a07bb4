// Page keys in the console's URLs. A section that asks a Durable Object per row (pools, quotas,
// clusters: data.ts `CONSOLE_FANOUT_PAGE`) shows one page; its position is the last row's key in
// the query (`pools=<team>/<template>`, `quotas=<team>`, `clusters=<cluster>`), one parameter per
// section, so paging one leaves the others where they are, a link works without JS, and the live
// fragment's URL carries it (a poll refreshes the page on show). A malformed key is a 400.
import { z } from "zod";
import { ApiError } from "../../schema/errors.ts";
import { TeamName } from "../../schema/api/team.ts";
import { TemplateId, TemplateSpec } from "../../schema/api/template.ts";
import type { TemplatePageCursor } from "../../durable-objects/store/templates.ts";

const ClusterName = TemplateSpec.shape.cluster.unwrap();

export interface PageKeys {
  pools?: TemplatePageCursor;
  quotas?: string;
  clusters?: string;
}

function field<T>(raw: string | undefined, parse: (s: string) => T | undefined, name: string): T | undefined {
  if (raw === undefined || raw === "") return undefined;
  const v = raw.length <= 200 ? parse(raw) : undefined;
  if (v === undefined) throw new ApiError("bad_request", `${name} is not a page key`);
  return v;
}

const ok = <T>(schema: z.ZodType<T>) => (s: string) => {
  const r = schema.safeParse(s);
  return r.success ? r.data : undefined;
};

/** The page keys in a query (absent: the first page). */
export function parsePageKeys(query: (name: string) => string | undefined): PageKeys {
  return {
    pools: field(query("pools"), (s) => {
      const [team, template, ...rest] = s.split("/");
      if (rest.length || !TeamName.safeParse(team).success || !TemplateId.safeParse(template).success) return undefined;
      return { teamName: team!, templateId: template! };
    }, "pools"),
    quotas: field(query("quotas"), ok(TeamName), "quotas"),
    clusters: field(query("clusters"), ok(ClusterName), "clusters"),
  };
}

function encode(keys: PageKeys): Record<string, string> {
  const out: Record<string, string> = {};
  if (keys.clusters) out.clusters = keys.clusters;
  if (keys.pools) out.pools = `${keys.pools.teamName}/${keys.pools.templateId}`;
  if (keys.quotas) out.quotas = keys.quotas;
  return out;
}

/** `path` with these page keys (and `extra`, e.g. the fragment's name). */
export function pageHref(path: string, keys: PageKeys, extra: Record<string, string> = {}): string {
  const q = new URLSearchParams({ ...encode(keys), ...extra }).toString();
  return q ? `${path}?${q}` : path;
}
