// POST /sandboxes (v1) and POST /v2/sandboxes: parse the body and the OpenKruise metadata
// extensions, then the create operation (durable-objects/operations/create-sandbox.ts).
import type { Context } from "hono";
import { createSandbox } from "../../durable-objects/operations/create-sandbox.ts";
import { parseCreateExtensions } from "../../schema/api/extensions.ts";
import { assertNetworkSupported } from "../../schema/api/network-support.ts";
import { NewSandbox, NewSandboxV2 } from "../../schema/api/sandbox.ts";
import { ApiError } from "../api-error.ts";
import { readJson } from "../body.ts";
import type { AppEnv } from "../env.ts";
import { renderSandbox } from "./render.ts";

export function createSandboxRoute(version: "v1" | "v2") {
  return async function createSandboxHandler(c: Context<AppEnv>) {
    const body = await readJson(c, version === "v1" ? NewSandbox : NewSandboxV2);
    assertNetworkSupported(body.network, body.iam);
    const ext = parseCreateExtensions(body.metadata);
    const res = await createSandbox(c.env, c.get("caller"), { version, body, ext });
    if (!res.ok) throw ApiError.from(res.error);
    return c.json(renderSandbox(res.sandbox, c.env.SANDBOX_DOMAIN), 201);
  };
}
