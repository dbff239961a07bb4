// Every E2B route this server does not serve answers 501 `{code, message}` naming it, never a
// 404: the SDKs read a 404 as "sandbox not found" or "template not found" and would report a live
// sandbox as gone. Mounted after every served route, so it only sees what they did not take. A
// route about one sandbox answers the caller's own with 501 and anyone else's with the usual 404.
import { Hono, type Context, type MiddlewareHandler } from "hono";
import { E2B_ROUTES } from "../../schema/api/e2b-routes.gen.ts";
import { sandboxNotFoundMessage } from "../../schema/errors.ts";
import { SANDBOX_ID_PATTERN } from "../../schema/protocol/ids.ts";
import { ApiError } from "../api-error.ts";
import { requireApiKey } from "../auth/middleware.ts";
import type { AppEnv } from "../env.ts";
import { accessOf, sandboxHandle } from "./stubs.ts";

export const unserved = new Hono<AppEnv>();

const auth = requireApiKey();
/** The key is checked before the answer, as for a served route (some paths are outside the app's
 * authenticated prefixes, and a caller already resolved is not resolved again). */
const authOnce: MiddlewareHandler<AppEnv> = (c, next) => (c.get("caller") ? next() : auth(c, next));

for (const [method, path] of E2B_ROUTES) {
  const honoPath = path.replace(/\{(\w+)\}/g, ":$1");
  const what = `${method} ${path}`;
  unserved.on(method, honoPath, authOnce, async (c: Context<AppEnv>) => {
    const id = c.req.param("sandboxID");
    if (id !== undefined) await assertVisible(c, id);
    throw new ApiError("not_implemented", `${what} is not supported by this server yet`);
  });
}

async function assertVisible(c: Context<AppEnv>, id: string): Promise<void> {
  const info = SANDBOX_ID_PATTERN.test(id) ? await sandboxHandle(c.env, id).info(accessOf(c.get("caller"))) : undefined;
  if (!info?.ok) throw new ApiError("sandbox_not_found", sandboxNotFoundMessage(id));
}
