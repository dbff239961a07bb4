// EdgeMetricsDO: the sum of every isolate's flushed counts (edge-metrics.ts), kept in its storage so
// a restart of the object does not reset counters Prometheus treats as monotonic. One instance
// (`idFromName("edge")`); a flush every FLUSH_MS per active isolate is all it sees.
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env.ts";
import { emptyCounts, mergeCounts, type Counts } from "./counts.ts";

const KEY = "totals";

export class EdgeMetricsDO extends DurableObject<Env> {
  private totals: Counts = emptyCounts();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    void ctx.blockConcurrencyWhile(async () => {
      this.totals = (await ctx.storage.get<Counts>(KEY)) ?? emptyCounts();
    });
  }

  async add(delta: Counts): Promise<void> {
    mergeCounts(this.totals, delta);
    await this.ctx.storage.put(KEY, this.totals);
  }

  snapshot(): Counts {
    return this.totals;
  }
}
