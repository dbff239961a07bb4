import type { IncomingMessage, ServerResponse } from "node:http";
import type { RuntimeSandbox } from "../sandbox.ts";
import { sendJson } from "./respond.ts";

export function getEnvs(_req: IncomingMessage, res: ServerResponse, sbx: RuntimeSandbox): void {
  sendJson(res, 200, sbx.envVars);
}
