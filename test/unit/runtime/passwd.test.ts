import { describe, expect, it } from "vitest";
import { parseGroup, parsePasswd } from "../../../controllers/runtime/passwd.ts";

describe("user database parsing", () => {
  it("reads passwd entries and skips malformed lines", () => {
    const text = "root:x:0:0:root:/root:/bin/bash\n# comment\nbroken:line\nuser:x:1000:1000::/home/user:/bin/bash\n";
    expect(parsePasswd(text)).toEqual([
      { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" },
      { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" },
    ]);
  });

  it("maps gids to group names, first one wins", () => {
    expect(parseGroup("root:x:0:\nuser:x:1000:\nalias:x:1000:\n")).toEqual(new Map([[0, "root"], [1000, "user"]]));
  });
});
