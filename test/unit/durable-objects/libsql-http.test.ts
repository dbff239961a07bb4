import { describe, expect, it } from "vitest";
import { pipelineUrl } from "../../../durable-objects/store/libsql-http.ts";

describe("pipelineUrl", () => {
  it("sends http(s) URLs to their own host, and libsql ones over TLS unless tls=0", () => {
    expect(pipelineUrl("http://127.0.0.1:8080")).toBe("http://127.0.0.1:8080/v2/pipeline");
    expect(pipelineUrl("https://db.example.test/")).toBe("https://db.example.test/v2/pipeline");
    expect(pipelineUrl("libsql://db-team.turso.example")).toBe("https://db-team.turso.example/v2/pipeline");
    expect(pipelineUrl("libsql://127.0.0.1:8080?tls=0")).toBe("http://127.0.0.1:8080/v2/pipeline");
  });

  it("leaves to the client what it cannot take as it is", () => {
    for (const url of ["ws://127.0.0.1:8080", "wss://db.example.test", "http://db.example.test/base", "http://u:p@db.example.test", "libsql://db.example.test?authToken=x", "http://db.example.test?tls=0", "not a url"]) {
      expect(pipelineUrl(url), url).toBeNull();
    }
  });
});
