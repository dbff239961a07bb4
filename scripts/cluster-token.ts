// Prints a cluster's agent token, for the operator to put in that cluster's `sandbox-agent` Secret:
//   CLUSTER_TOKEN=<the edge's CLUSTER_TOKEN> npm run cluster-token -- <cluster id>
// The root comes from the environment, not argv, so it stays out of the shell history and `ps`.
import { CLUSTER_ID, clusterTokenFor } from "../schema/protocol/cluster-token.ts";

const root = process.env.CLUSTER_TOKEN;
const cluster = process.argv[2] ?? "";
if (!root || !CLUSTER_ID.test(cluster) || process.argv.length > 3) {
  process.stderr.write("usage: CLUSTER_TOKEN=<the edge's CLUSTER_TOKEN> npm run cluster-token -- <cluster id: 1-63 of [a-z0-9-]>\n");
  process.exit(2);
}
process.stdout.write(`${await clusterTokenFor(root, cluster)}\n`);
