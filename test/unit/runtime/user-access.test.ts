import { describe, expect, it } from "vitest";
import { grants } from "../../../controllers/runtime/user-access.ts";

const user = { uid: 1000, gid: 1000 };
const file = (mode: number, uid = 0, gid = 0) => ({ mode: 0o100000 | mode, uid, gid });

describe("grants (mode bits for the acting user)", () => {
  it("uses the owner, group or other class, whichever applies first", () => {
    expect(grants(file(0o600, 1000), user, 4)).toBe(true);
    expect(grants(file(0o600), user, 4)).toBe(false);
    expect(grants(file(0o640, 0, 1000), user, 4)).toBe(true);
    expect(grants(file(0o044, 1000), user, 4)).toBe(false); // the owner class decides, not other
    expect(grants(file(0o755), user, 5)).toBe(true);
    expect(grants(file(0o754), user, 5)).toBe(false);
  });

  it("lets uid 0 through", () => {
    expect(grants(file(0o000, 1000), { uid: 0, gid: 0 }, 7)).toBe(true);
  });
});
