// Lifecycle hooks (issue 13.5; OpenKruise has preUpgrade/postUpgrade as exec hooks, §1.6, and
// feature request #743 asks for prePause/postResume with exec or HTTP and a failure policy): what
// a template's `lifecycle` holds. An exec hook runs inside the sandbox through its runtime's
// process API (as root, the way upstream runs upgrade hooks); an HTTP hook is a request to a port
// of the sandbox through the cluster's ingress. Both are bounded by `timeoutSeconds`.
import { z } from "zod";
import { MAX_PATH_LENGTH } from "./limits.ts";

export const HOOK_NAMES = ["prePause", "postResume", "preUpgrade", "postUpgrade"] as const;
export type HookName = (typeof HOOK_NAMES)[number];

const Exec = z.strictObject({ command: z.array(z.string().max(4096)).min(1).max(64) });
const HttpHook = z.strictObject({
  port: z.int().min(1).max(65535),
  path: z.string().max(MAX_PATH_LENGTH).regex(/^\/[^\s#]*$/, "an absolute path with an optional query").default("/"),
  method: z.enum(["GET", "POST"]).default("GET"),
});

export const Hook = z
  .strictObject({
    exec: Exec.optional(),
    http: HttpHook.optional(),
    timeoutSeconds: z.int().min(1).max(600).default(60),
    /** `Fail`: a failed hook stops what it guards (a pause stays undone); `Ignore`: noted only. */
    failurePolicy: z.enum(["Fail", "Ignore"]).default("Fail"),
  })
  .refine((h) => (h.exec === undefined) !== (h.http === undefined), { message: "a hook has exactly one of exec and http" });
export type Hook = z.infer<typeof Hook>;

export const Lifecycle = z.strictObject({ prePause: Hook.optional(), postResume: Hook.optional(), preUpgrade: Hook.optional(), postUpgrade: Hook.optional() });
export type Lifecycle = z.infer<typeof Lifecycle>;
