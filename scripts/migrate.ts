// Applies the drizzle-kit migrations in schema/db/migrations to a libSQL server.
//   node scripts/migrate.ts <url> [authToken]      (or LIBSQL_URL / LIBSQL_AUTH_TOKEN)
// Idempotent: applied migrations are recorded in __drizzle_migrations and skipped.
import { createClient } from "@libsql/client/web";
import { drizzle } from "drizzle-orm/libsql/web";
import { migrate as drizzleMigrate } from "drizzle-orm/libsql/migrator";
import { resolve } from "node:path";

export const MIGRATIONS_DIR = resolve(import.meta.dirname, "../schema/db/migrations");

export async function migrate(url: string, authToken?: string): Promise<void> {
  const client = createClient({ url, authToken });
  try {
    await drizzleMigrate(drizzle({ client }), { migrationsFolder: MIGRATIONS_DIR });
  } finally {
    client.close();
  }
}

if (import.meta.main) {
  const url = process.argv[2] ?? process.env.LIBSQL_URL;
  if (!url) {
    console.error("usage: node scripts/migrate.ts <libsql-url> [authToken]");
    process.exit(2);
  }
  await migrate(url, process.argv[3] ?? process.env.LIBSQL_AUTH_TOKEN);
  console.log(`migrated ${url}`);
}
