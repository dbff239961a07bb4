// GlobalSecurityProfiles see only a sandbox's platform labels (schema/api/traffic-policy.ts
// selectsSandbox, review 25 M4), as GlobalTrafficPolicies do. The L7 selection (l7/profile-crd.ts
// profilesFor) matches every profile against one label set, so the global ones are judged here
// first and handed on with their selector spent: a tenant's label can then neither put its
// sandbox under a global profile nor take it out of one (a `NotIn`/`DoesNotExist` selector).
import { selectsSandbox } from "../../schema/api/traffic-policy.ts";
import type { ProfileObject } from "./l7/profile-crd.ts";

/** `objects` with the global profiles that do not select `labels` (selectorLabels) dropped and
 * the selectors of those that do removed; team profiles as they are. */
export function judgeGlobalProfiles(objects: readonly ProfileObject[], labels: Readonly<Record<string, string>>): ProfileObject[] {
  return objects.flatMap((o) => {
    if (o.kind !== "GlobalSecurityProfile") return [o];
    if (!selectsSandbox(o.spec.selector, labels, true)) return [];
    const { selector: _spent, ...spec } = o.spec;
    return [{ ...o, spec }];
  });
}
