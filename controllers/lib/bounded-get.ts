// A GET of a tenant-reachable endpoint (a pod's runtime spans, a pod sidecar's audit records): the
// answer is the tenant's data, so it is read only up to a size, within a time, and only when 200.
// A redirect is never followed: the tenant answers on that port, and following would send the
// agent's GET (from the agent's network position, with the sandbox's token: undici keeps custom
// headers across origins, `authorization` within one) to a URL the tenant picked. A 3xx is just
// an answer that is not 200.
/** The body of a GET, refused (thrown) past `maxBytes` or `timeoutMs`, or on any status but 200
 * ("`who` answered 403"). */
export async function boundedGet(url: URL, headers: Record<string, string>, o: { maxBytes: number; timeoutMs: number; who: string }): Promise<string> {
  const { maxBytes, timeoutMs } = o;
  const res = await fetch(url, { headers, redirect: "manual", signal: AbortSignal.timeout(timeoutMs) });
  if (res.status !== 200) {
    await res.body?.cancel();
    throw new Error(`${o.who} answered ${res.status}`);
  }
  if (Number(res.headers.get("content-length") ?? 0) > maxBytes) {
    await res.body?.cancel();
    throw new Error(`answer over ${maxBytes} bytes`);
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body ?? []) {
    size += chunk.byteLength;
    if (size > maxBytes) throw new Error(`answer over ${maxBytes} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}
