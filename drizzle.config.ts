// drizzle-kit: `npx drizzle-kit generate` writes SQL migrations from schema/db/tables.ts into
// schema/db/migrations/; scripts/migrate.ts applies them.
import { defineConfig } from "drizzle-kit";

export default defineConfig({
  dialect: "turso",
  schema: "./schema/db/tables.ts",
  out: "./schema/db/migrations",
  dbCredentials: { url: process.env.LIBSQL_URL ?? "http://127.0.0.1:8080" },
});
