import type { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness } from "./support/harness.ts";

let h: Harness;
let sbx: Sandbox;
beforeAll(async () => {
  h = await startHarness();
  sbx = await h.create({ secure: true });
});
afterAll(() => h?.close());

describe("secured sandbox", () => {
  it("downloadUrl works with a plain fetch and no headers", async () => {
    await sbx.files.write("hello.txt", "hello signed");
    const res = await fetch(await sbx.downloadUrl("hello.txt"));
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("hello signed");
  });

  it("an expired signature is refused with 401", async () => {
    const url = await sbx.downloadUrl("hello.txt", { useSignatureExpiration: 1 });
    await new Promise((r) => setTimeout(r, 2100));
    const res = await fetch(url);
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ code: 401, message: "signature is already expired" });
  });

  it("a tampered signature or another path is refused", async () => {
    const url = new URL(await sbx.downloadUrl("hello.txt"));
    url.searchParams.set("path", "other.txt");
    expect((await fetch(url)).status).toBe(401);
  });

  it("uploadUrl accepts a multipart POST", async () => {
    const form = new FormData();
    form.append("file", new Blob(["uploaded"]), "hello-up.txt");
    const res = await fetch(await sbx.uploadUrl("hello-up.txt"), { method: "POST", body: form });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual([{ name: "hello-up.txt", path: "/home/user/hello-up.txt", type: "file" }]);
    expect(await sbx.files.read("hello-up.txt")).toBe("uploaded");
  });

  it("requests without the access token are 401 JSON", async () => {
    const res = await fetch(`${h.runtimeUrl}/filesystem.Filesystem/Stat`, {
      method: "POST",
      headers: { "content-type": "application/json", "e2b-sandbox-id": sbx.sandboxId },
      body: JSON.stringify({ path: "/" }),
    });
    expect(res.status).toBe(401);
    expect((await res.json()).code).toBe(401);
    const files = await fetch(`${h.runtimeUrl}/files?path=hello.txt`, { headers: { "e2b-sandbox-id": sbx.sandboxId } });
    expect(files.status).toBe(401);
    const health = await fetch(`${h.runtimeUrl}/health`, { headers: { "e2b-sandbox-id": sbx.sandboxId } });
    expect(health.status).toBe(204);
  });
});
