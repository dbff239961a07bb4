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

  // A layer keeps what its step leaves: apt's downloaded archives and indexes left by an install
  // step stay in the template's layers (325 MB of the Python layer's 1413 MB, 112 of the R
  // layer's 175), and a later step's `rm` would only hide them under whiteouts.
  it("cleans apt's archives and lists in every step that installs packages (the layers keep no apt cache)", async () => {
    const { steps } = await templateSteps(codeInterpreterTemplate());
    const installs = steps.filter((s) => s.type === "RUN" && /apt-get install/.test(s.args[0]!));
    expect(installs.length).toBeGreaterThanOrEqual(2);
    for (const step of installs) {
      const command = step.args[0]!;
      expect(command, "an apt step ends by cleaning apt's downloads and lists").toMatch(/apt-get install[^]*&& apt-get clean && rm -rf \/var\/lib\/apt\/lists\/\*$/);
    }
  });
});
