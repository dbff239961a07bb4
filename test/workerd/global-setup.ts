// Runs once in Node before the workerd tier: applies the migrations to the sqld the runner
// started (LIBSQL_URL) and seeds the admin team, admin key and `base` template. Test files use
// their own team names, so they never collide.
import { migrate } from "../../scripts/migrate.ts";
import { seed } from "../../scripts/seed.ts";

export default async function setup(): Promise<void> {
  const url = process.env.LIBSQL_URL ?? "http://127.0.0.1:8080";
  await migrate(url);
  await seed({ libsqlUrl: url, adminApiKey: "e2b_00000000000000000000000000000000000000ad", pepper: "test-pepper", baseReplicas: 0 });
}
