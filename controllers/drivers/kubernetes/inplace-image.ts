// Pure: whether an in-place image change (E2B `e2b.agents.kruise.io/image`, a SandboxClaim's
// `inplaceUpdate.image`) names an image the operator allows (the injection config's
// `pod-policy.inplaceImages`; review 25 M3). A tenant with an API key would otherwise run any
// image reference, and a private image another team's pod pulled onto the node runs without
// credentials under the default IfNotPresent pull policy (Kubernetes issue #18787).
import { imageRepository } from "./commit/machine.ts";

/** Why `image` may not be set in place (undefined: it may). */
export function inplaceImageProblem(image: string, allowed: readonly string[]): string | undefined {
  const repo = imageRepository(image);
  const ok = allowed.some((p) => {
    const prefix = p.trim().toLowerCase();
    return prefix.endsWith("/") ? repo.startsWith(prefix) : repo === imageRepository(prefix);
  });
  if (ok) return undefined;
  const list = allowed.length ? `it allows ${allowed.map((p) => JSON.stringify(p)).join(", ")}` : "it allows none";
  return `in-place image ${JSON.stringify(image)} (repository ${repo}) is not in the injection config's pod-policy.inplaceImages: ${list}`;
}
