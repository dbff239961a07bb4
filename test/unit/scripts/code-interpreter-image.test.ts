// The Kubernetes code-interpreter image (k8s/code-interpreter/Dockerfile) installs the packages the
// local `code-interpreter` template's steps install on `base` (scripts/lib/templates.ts): the same
// kernels and libraries on both drivers. A step added to the template (another kernel's packages)
// fails this until the image gets them too.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { codeInterpreterTemplate, templateSteps } from "../../../scripts/lib/templates.ts";

/** The package names of every `apt-get install` in a shell command (options left out). */
function aptPackages(command: string): string[] {
  return [...command.matchAll(/apt-get install((?:\s+(?:\\\n)?\s*[^\s&|;\\]+)+)/g)].flatMap((m) => m[1]!.split(/\s+/).filter((w) => w && w !== "\\" && !w.startsWith("-")));
}

describe("the code-interpreter image for Kubernetes", () => {
  it("installs exactly the packages of the local template's steps", async () => {
    const { steps } = await templateSteps(codeInterpreterTemplate());
    const local = steps.filter((s) => s.type === "RUN").flatMap((s) => aptPackages(s.args[0]!));
    const image = readFileSync("k8s/code-interpreter/Dockerfile", "utf8").replace(/\\\n/g, " ");
    const imagePackages = image.split("\n").filter((l) => l.startsWith("RUN ")).flatMap(aptPackages);
    expect(local).toContain("python3-ipykernel");
    expect(new Set(imagePackages), "k8s/code-interpreter/Dockerfile must install what scripts/lib/templates.ts installs").toEqual(new Set(local));
  });
});
