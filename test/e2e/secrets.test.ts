// E2B's secrets through the real SDK and the whole system: Secret.create/getInfo/exists/list/
// update/destroy against the edge (values are write-only: nothing the SDK gets back holds one).
import { Secret, SecretNotFoundError } from "e2b";
import { describe, expect, it } from "vitest";
import { e2b, uniqueTag } from "./sdk.ts";

describe("Secret (SDK)", () => {
  it("creates, reads, lists, updates and destroys a secret; no answer carries its value", async () => {
    const opts = e2b();
    const name = `tok-${uniqueTag()}`;
    const value = `value-${uniqueTag()}-never-returned`;
    const info = await Secret.create(name, value, { ...opts, metadata: { purpose: "e2e" } });
    expect(info).toMatchObject({ name, version: 1, metadata: { purpose: "e2e" } });
    expect(info.secretId).toMatch(/^sec_/);
    expect(info.createdAt).toBeInstanceOf(Date);
    expect(JSON.stringify(info)).not.toContain(value);

    expect(await Secret.getInfo(name, opts)).toMatchObject({ secretId: info.secretId, version: 1 });
    expect(await Secret.exists(info.secretId, opts)).toBe(true);

    const updated = await Secret.update(name, `${value}-2`, opts);
    expect(updated).toMatchObject({ secretId: info.secretId, version: 2 });

    const seen = [];
    const pages = Secret.list({ ...opts, limit: 1 });
    while (pages.hasNext) seen.push(...(await pages.nextItems()));
    expect(seen.map((s) => s.name)).toContain(name);
    expect(JSON.stringify(seen)).not.toContain(value);

    expect(await Secret.destroy(name, opts)).toBe(true);
    expect(await Secret.destroy(name, opts)).toBe(false);
    expect(await Secret.exists(name, opts)).toBe(false);
    await expect(Secret.getInfo(name, opts)).rejects.toBeInstanceOf(SecretNotFoundError);
  });
});
