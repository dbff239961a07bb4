// In-place images only from the operator's repositories (review 25 M3): prefixes compared on the
// repository with Docker Hub's defaults filled in, tag and digest ignored, case folded.
import { describe, expect, it } from "vitest";
import { inplaceImageProblem } from "../../../../../controllers/drivers/kubernetes/inplace-image.ts";

const ALLOWED = ["python", "registry.example.com/team-a/", "ghcr.io/org/tool"];

describe("inplaceImageProblem", () => {
  it.each(["python:3.13", "docker.io/library/python:3.12", "index.docker.io/library/python@sha256:" + "a".repeat(64), "registry.example.com/team-a/app:1", "registry.example.com/team-a/deep/app", "GHCR.IO/org/tool:latest"])("allows %s", (image) =>
    expect(inplaceImageProblem(image, ALLOWED)).toBeUndefined(),
  );

  it.each(["registry.internal/team-b/app:v3", "python-evil:1", "pythonx/python:3", "registry.example.com/team-a-evil/app", "registry.example.com/team-a", "ghcr.io/org/tool-other", "ghcr.io/org/tool/sub"])("refuses %s", (image) =>
    expect(inplaceImageProblem(image, ALLOWED)).toMatch(/is not in the injection config's pod-policy.inplaceImages/),
  );

  it("none allowed: every image is refused, saying so", () => {
    expect(inplaceImageProblem("python:3.13", [])).toMatch(/it allows none/);
  });
});
