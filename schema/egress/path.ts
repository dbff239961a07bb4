// The grammar of an HTTP request path (without its query) as the L7 egress rules see it: the
// least-rewritten form that every reader agrees on, or why a path has none. The proxy sends this
// form upstream and judges the readings servers make of it (controllers/traffic/l7/path.ts); a
// SecurityProfile's own paths must be written in it (`rulePathProblem`), since they are compared
// with it byte for byte. Shared by the edge's validation and the proxy, so both use one grammar.
// Pure; linear in the path.
//
// The form: unreserved characters percent-decoded and other escapes in upper case (RFC 3986
// 6.2.2), dot segments removed (5.2.4), a leading run of `/` made one (else a URI parser reads
// `//x/secret` as host `x`, path `/secret`), characters a path may not hold raw but Node's parser
// lets through (`|{}^` and backquote) escaped. Kept as they came: inner empty segments (`//`,
// meaningful in S3 keys and signed URLs) and `;` parameters. Refused, as what servers read in
// more than one way: an encoded `/` or `\`, a raw `\`, `%00`, a bad escape, `#`, escaped bytes
// that are not UTF-8 (`%C0%AF`, an overlong `/`), a dot segment with `;` parameters (`/..;/`,
// which Tomcat reads as `..`), a path not starting with `/`.

export type PathForm = { path: string } | { invalid: string };

const UNRESERVED = /^[A-Za-z0-9\-._~]$/;
/** Characters a path may carry as they are (RFC 3986 pchar and "/"), besides "%" and "\". */
const PATH_CHAR = /^[A-Za-z0-9\-._~!$&'()*+,;=:@/]$/;
const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Unreserved escapes decoded, the others in upper case, raw characters checked; dot segments
 * left. Escaped bytes past ASCII must be UTF-8 (no overlong forms, no surrogates). */
export function decodeUnreserved(raw: string): PathForm {
  let out = "";
  let run: number[] = []; // escaped bytes past ASCII, checked as UTF-8 when the run ends
  const endRun = (): string | undefined => {
    if (!run.length) return undefined;
    try {
      UTF8.decode(new Uint8Array(run));
    } catch {
      return `the path holds escaped bytes that are not UTF-8 (${run.map((b) => `%${b.toString(16).toUpperCase()}`).join("")})`;
    }
    run = [];
    return undefined;
  };
  for (let i = 0; i < raw.length; i++) {
    const ch = raw[i]!;
    if (ch === "%") {
      const hex = raw.slice(i + 1, i + 3);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) return { invalid: `the path has an invalid percent-escape at character ${i}` };
      const byte = parseInt(hex, 16);
      const c = String.fromCharCode(byte);
      if (c === "\0") return { invalid: "the path holds %00" };
      // Decoded by some servers and not others: a `/` that is and is not a separator.
      if (c === "/" || c === "\\") return { invalid: `the path holds an encoded ${c === "/" ? "slash (%2F)" : "backslash (%5C)"}` };
      if (byte >= 0x80) run.push(byte);
      else {
        const bad = endRun();
        if (bad) return { invalid: bad };
      }
      out += UNRESERVED.test(c) ? c : `%${hex.toUpperCase()}`;
      i += 2;
      continue;
    }
    const bad = endRun();
    if (bad) return { invalid: bad };
    if (ch === "\\") return { invalid: "the path holds a backslash, which some servers read as /" };
    if (ch === "#") return { invalid: "the path holds #, which some servers cut it at" };
    if (PATH_CHAR.test(ch)) out += ch;
    // Node's parser refuses a request target with raw bytes past ASCII (HPE_INVALID_URL) before the
    // proxy sees it; a rule path comes as a JSON string and may hold them, so they are refused here.
    else if (ch.charCodeAt(0) > 0x7f) return { invalid: "the path holds a character past ASCII (send it percent-encoded)" };
    // Not allowed raw but let through by Node's parser (`|`, braces, `^`, backquote): sent
    // escaped, as a browser would, so what was judged is what the server decodes.
    else out += `%${ch.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0")}`;
  }
  const bad = endRun();
  return bad ? { invalid: bad } : { path: out };
}

/** A segment that is a dot segment once a server drops its `;` parameters. */
export const DOT_SEGMENT = /^\.\.?(;|$)/;

/** The form above of a path (no query), or why it has none. Idempotent. */
export function normalPath(raw: string): PathForm {
  if (!raw.startsWith("/")) return { invalid: "the request path must start with /" };
  const d = decodeUnreserved(raw);
  if ("invalid" in d) return d;
  const segments = d.path.split("/");
  const kept: string[] = [];
  for (let k = 1; k < segments.length; k++) {
    const s = segments[k]!;
    const last = k === segments.length - 1;
    if (s !== "." && s !== ".." && DOT_SEGMENT.test(s)) return { invalid: "the path has a dot segment with parameters (;)" };
    if (s === "." || s === "..") {
      if (s === "..") kept.pop();
      // `/a/.` and `/a/b/..` name a directory: `/a/`.
      if (last) kept.push("");
    } else kept.push(s); // empty segments kept: `//` can be part of a key
  }
  // A leading run of `/` goes as one: a target `//x/secret` is a network-path reference (RFC 3986
  // 4.2), read by URI parsers (Python's urlsplit, java.net.URI, WHATWG URL) as host `x`, path
  // `/secret`, which no reading here would judge. Merged rather than refused: s25 merged every
  // `//`, and a client joining `base/` and `/path` sends one; only a key starting with `/` (S3
  // virtual-hosted style) is rewritten. Inner `//` (S3 keys) is kept.
  return { path: `/${kept.join("/")}`.replace(/^\/{2,}/, "/") };
}

/** Why a rule's path (a SecurityProfile's Prefix or Exact value) would never match as written, or
 * undefined. Requests are judged in the form above, so a rule must be written in it too:
 * `/%61dmin` would match nothing (a request for it is judged as `/admin`). */
export function rulePathProblem(value: string): string | undefined {
  const n = normalPath(value);
  if ("invalid" in n) return `path ${JSON.stringify(value)} can never match: ${n.invalid.replace(/^the (request )?path/, "it")}`;
  if (n.path !== value) return `path ${JSON.stringify(value)} is not in the form requests are judged in (escapes of unreserved characters decoded, other escapes in upper case, no dot segments): write ${JSON.stringify(n.path)}`;
  return undefined;
}
