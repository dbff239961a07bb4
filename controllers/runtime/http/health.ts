import type { IncomingMessage, ServerResponse } from "node:http";

export function getHealth(_req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(204).end();
}
