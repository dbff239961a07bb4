// POST /init: the orchestrator sets the access token, sandbox env, default user and workdir.
// Idempotent by timestamp: an older request than the last applied one changes nothing.
import type { IncomingMessage, ServerResponse } from "node:http";
import { parseInitRequest } from "../../../schema/envd/http.ts";
import type { RuntimeSandbox } from "../sandbox.ts";
import { readJson } from "./read-json.ts";
import { HttpError, presentedToken, UNAUTHORIZED } from "./respond.ts";

export async function postInit(req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox): Promise<void> {
  // Once a token is set, only its holder may re-initialise (e.g. rotate it on resume).
  if (sbx.accessToken && !sbx.checkToken(presentedToken(req))) throw new HttpError(401, UNAUTHORIZED);
  const parsed = parseInitRequest(await readJson(req));
  if (!parsed.ok) throw new HttpError(400, `invalid init request: ${parsed.error}`);
  if (parsed.value.defaultUser && !sbx.view.lookupUser(parsed.value.defaultUser)) {
    throw new HttpError(400, `default user '${parsed.value.defaultUser}' does not exist`);
  }
  sbx.init(parsed.value);
  res.writeHead(204).end();
}
