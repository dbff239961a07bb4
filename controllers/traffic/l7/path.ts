// A request target's path as the L7 rules judge it and as the upstream then receives it, so the
// server serves what was judged: RFC 3986 normalisation (6.2.2: unreserved characters
// percent-decoded, escapes in upper case; 5.2.4: dot segments removed) with empty segments merged,
// as Envoy's `normalize_path`, `merge_slashes` and `path_with_escaped_slashes_action:
// REJECT_REQUEST` do. What servers read in more than one way is refused instead of guessed: an
// encoded `/` or `\`, a raw `\`, `%00`, a bad escape, `#`, a dot segment with `;` parameters
// (`/..;/`, which Tomcat reads as `..`), a path not starting with `/`. The query is kept as it
// is. Pure; linear in the target (Node bounds it with the request head).

export type NormalTarget = { target: string; path: string } | { invalid: string };

const UNRESERVED = /^[A-Za-z0-9\-._~]$/;
/** Characters a path may carry as they are (RFC 3986 pchar and "/"), besides "%" and "\". */
const PATH_CHAR = /^[A-Za-z0-9\-._~!$&'()*+,;=:@/]$/;

/** The normal form of an origin-form target (`/path?query`), or why it has none. `*` (OPTIONS)
 * is its own. */
export function normalizeTarget(target: string): NormalTarget {
  if (target === "*") return { target, path: target };
  const q = target.indexOf("?");
  const raw = q < 0 ? target : target.slice(0, q);
  const query = q < 0 ? "" : target.slice(q);
  if (!raw.startsWith("/")) return { invalid: "the request path must start with /" };
  let decoded = "";
  for (let i = 0; i < raw.length; i++) {
    const ch = raw[i]!;
    if (ch === "%") {
      const hex = raw.slice(i + 1, i + 3);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) return { invalid: `the path has an invalid percent-escape at character ${i}` };
      const c = String.fromCharCode(parseInt(hex, 16));
      if (c === "\0") return { invalid: "the path holds %00" };
      // Decoded by some servers and not others: a `/` that is and is not a separator.
      if (c === "/" || c === "\\") return { invalid: `the path holds an encoded ${c === "/" ? "slash (%2F)" : "backslash (%5C)"}` };
      decoded += UNRESERVED.test(c) ? c : `%${hex.toUpperCase()}`;
      i += 2;
    } else if (ch === "\\") return { invalid: "the path holds a backslash, which some servers read as /" };
    else if (ch === "#") return { invalid: "the path holds #, which some servers cut it at" };
    else if (PATH_CHAR.test(ch)) decoded += ch;
    else if (ch.charCodeAt(0) > 0xff) return { invalid: "the path holds a character that is not a byte" };
    // Not allowed raw but let through by Node's parser (`|`, braces, `^`, backquote; it refuses
    // bytes past ASCII itself): sent escaped, as a browser would, so what was judged is what the
    // server decodes.
    else decoded += `%${ch.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0")}`;
  }
  const segments = decoded.split("/");
  const kept: string[] = [];
  for (let k = 1; k < segments.length; k++) {
    const s = segments[k]!;
    const last = k === segments.length - 1;
    if (/^\.\.?;/.test(s)) return { invalid: "the path has a dot segment with parameters (;)" };
    if (s === "." || s === "..") {
      if (s === "..") kept.pop();
      // `/a/.` and `/a/b/..` name a directory: `/a/`.
      if (last) kept.push("");
    } else if (s !== "" || last) kept.push(s); // empty segments merged, a trailing `/` kept
  }
  const path = `/${kept.join("/")}`;
  return { target: path + query, path };
}
