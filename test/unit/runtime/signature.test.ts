import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { checkFileAccess, fileSignature } from "../../../controllers/runtime/http/signature.ts";

describe("file URL signatures", () => {
  it("match the SDK's v1 formula", () => {
    const raw = "/home/user/a.txt:read:user:tok:1700000000";
    const want = `v1_${createHash("sha256").update(raw).digest("base64").replace(/=+$/, "")}`;
    expect(fileSignature("/home/user/a.txt", "read", "user", "tok", 1700000000)).toBe(want);
    expect(fileSignature("a.txt", "write", "", "tok")).toMatch(/^v1_[A-Za-z0-9+/]+$/);
  });

  const base = { token: "tok", headerToken: undefined, checkHeaderToken: (t: string) => t === "tok", path: "a.txt", op: "read" as const, username: null, expiration: null, nowS: 1000 };

  it("open without a token, header token or signature with one", () => {
    expect(checkFileAccess({ ...base, token: undefined, signature: null })).toBeUndefined();
    expect(checkFileAccess({ ...base, headerToken: "tok", signature: null })).toBeUndefined();
    expect(checkFileAccess({ ...base, headerToken: "bad", signature: null })).toMatch(/does not match/);
    expect(checkFileAccess({ ...base, signature: null })).toBe("missing signature query parameter");
    expect(checkFileAccess({ ...base, signature: fileSignature("a.txt", "read", "", "tok") })).toBeUndefined();
  });

  it("binds path, operation, user and expiration", () => {
    const sig = fileSignature("a.txt", "read", "", "tok", 2000);
    expect(checkFileAccess({ ...base, signature: sig, expiration: "2000" })).toBeUndefined();
    expect(checkFileAccess({ ...base, signature: sig, expiration: "2001" })).toBe("invalid signature");
    expect(checkFileAccess({ ...base, signature: sig, expiration: "2000", op: "write" })).toBe("invalid signature");
    expect(checkFileAccess({ ...base, signature: sig, expiration: "2000", username: "root" })).toBe("invalid signature");
    expect(checkFileAccess({ ...base, signature: sig, expiration: "2000", nowS: 2001 })).toBe("signature is already expired");
  });
});
