// EOVERFLOW from a create in a file system whose user namespace does not map the runtime's uid
// (bwrap's /dev in a local sandbox) is a clear permission_denied; from anything else (a read, a
// stat) it keeps its own meaning, an internal error with the kernel's reason, and never claims a
// mount the Kubernetes runtime, which shares fs-errors.ts, does not have.
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { fsError } from "../../../controllers/runtime/fs-errors.ts";

const eoverflow = () => Object.assign(new Error("EOVERFLOW: value too large for defined data type, open '/x/y'"), { code: "EOVERFLOW" });

describe("fsError and EOVERFLOW", () => {
  it("a create (makeDir, a move's target) is permission_denied with the reason", () => {
    for (const action of ["create directory", "move to"]) {
      const e = fsError(eoverflow(), "/dev/d", action, true);
      expect(e.code).toBe(Code.PermissionDenied);
      expect(e.rawMessage).toBe(`cannot ${action} '/dev/d': the file system there was mounted in a user namespace where the files API cannot create; create it with a command`);
    }
  });

  it("anything else keeps the kernel's reason, not the create explanation", () => {
    for (const action of ["stat", "list", "remove", "move"]) {
      const e = fsError(eoverflow(), "/big", action);
      expect(e.code).toBe(Code.Internal);
      expect(e.rawMessage).toBe(`cannot ${action} '/big': value too large for defined data type`);
    }
  });
});
