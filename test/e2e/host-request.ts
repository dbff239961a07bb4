// A GET with an explicit Host header, as a client that resolves `{port}-{id}.{domain}` to the edge
// sends it; fetch() may not set Host.
import { request } from "node:http";

export function getWithHost(url: string, host: string): Promise<{ status: number; body: string }> {
  return new Promise((ok, fail) => {
    const req = request(url, { headers: { host } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => ok({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", fail);
    req.end();
  });
}
