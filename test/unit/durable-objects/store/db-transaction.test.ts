// The edge's libSQL client refuses interactive transactions before any request is made: with the
// one SQLite connection our sqld allows, one would hold it across round trips (durable-objects/store/db.ts).
import { describe, expect, it } from "vitest";
import { getDb } from "../../../../durable-objects/store/db.ts";

describe("the edge's libSQL client", () => {
  // Port 9 (discard) on loopback: nothing answers, so a transaction that reached the network would
  // fail with a connection error, not this message.
  const db = getDb({ LIBSQL_URL: "http://127.0.0.1:9" });

  it("refuses drizzle's db.transaction() with a message naming the batch instead", async () => {
    await expect(db.transaction(async () => {})).rejects.toThrow(/interactive libSQL transactions are not used here/);
  });

  it("refuses the client's own transaction() the same way", async () => {
    await expect(db.$client.transaction("write")).rejects.toThrow(/one batch/);
  });
});
