import { describe, expect, it } from "vitest";
import { goModeString, permBits } from "../../../controllers/runtime/filesystem/file-mode.ts";

describe("goModeString (Go FileMode.String)", () => {
  it.each([
    [0o100644, "-rw-r--r--"],
    [0o040755, "drwxr-xr-x"],
    [0o120777, "Lrwxrwxrwx"],
    [0o041777, "dtrwxrwxrwx"],
    [0o020666, "Dcrw-rw-rw-"],
    [0o060660, "Drw-rw----"],
    [0o010644, "prw-r--r--"],
    [0o140755, "Srwxr-xr-x"],
    [0o104755, "urwxr-xr-x"],
    [0o102755, "grwxr-xr-x"],
  ])("%o → %s", (mode, want) => {
    expect(goModeString(mode)).toBe(want);
  });

  it("mode keeps only the permission bits", () => {
    expect(permBits(0o104755)).toBe(0o755);
    expect(permBits(0o041777)).toBe(0o777);
  });
});
