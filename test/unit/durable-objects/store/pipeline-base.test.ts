// The index upsert goes straight to libSQL's HTTP pipeline only for URLs whose meaning is plain
// (http, https, and libsql, which the client takes as https); a WebSocket URL or one carrying
// options (tls=0, authToken, …) goes through @libsql/client, which knows them.
import { describe, expect, it } from "vitest";
import { pipelineBase } from "../../../../durable-objects/store/db.ts";

describe("pipelineBase", () => {
  it("posts to the server a plain URL names, libsql as https", () => {
    expect(pipelineBase("http://127.0.0.1:8080")).toBe("http://127.0.0.1:8080");
    expect(pipelineBase("http://127.0.0.1:8080/")).toBe("http://127.0.0.1:8080");
    expect(pipelineBase("https://db.example.turso.io")).toBe("https://db.example.turso.io");
    expect(pipelineBase("libsql://db.example.turso.io")).toBe("https://db.example.turso.io");
  });

  it("leaves WebSocket URLs, paths and options to the client", () => {
    expect(pipelineBase("ws://127.0.0.1:8080")).toBeNull();
    expect(pipelineBase("wss://db.example.turso.io")).toBeNull();
    expect(pipelineBase("libsql://db.example.turso.io?tls=0")).toBeNull();
    expect(pipelineBase("https://db.example.turso.io?authToken=x")).toBeNull();
    expect(pipelineBase("http://127.0.0.1:8080/some/path")).toBeNull();
    expect(pipelineBase("file:local.db")).toBeNull();
  });
});
