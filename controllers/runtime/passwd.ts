// Parsers for /etc/passwd and /etc/group, the sandbox's own user database, and a cache of them.
import { closeSync, constants, fstatSync, lstatSync, openSync, readFileSync, statSync } from "node:fs";
import type { PinnedPath } from "./pinned-path.ts";

export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

export function parsePasswd(text: string): PasswdEntry[] {
  const out: PasswdEntry[] = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const f = line.split(":");
    if (f.length < 7) continue;
    const uid = Number(f[2]);
    const gid = Number(f[3]);
    if (!Number.isInteger(uid) || !Number.isInteger(gid)) continue;
    out.push({ name: f[0]!, uid, gid, home: f[5]!, shell: f[6]! });
  }
  return out;
}

export function parseGroup(text: string): ReadonlyMap<number, string> {
  const out = new Map<number, string>();
  for (const line of text.split("\n")) {
    const f = line.split(":");
    if (f.length < 3 || line.startsWith("#")) continue;
    const gid = Number(f[2]);
    if (Number.isInteger(gid) && !out.has(gid)) out.set(gid, f[0]!);
  }
  return out;
}

/** Re-reads a file only when its mtime changes, so `useradd` during a run is picked up. With
 * `recheckMs`, the mtime is looked at no more than once in that window: a listing of a thousand
 * entries asks for names a thousand times and must not stat the file each time. */
export function cachedFile<T>(path: () => string | PinnedPath, parse: (text: string) => T, empty: T, recheckMs = 0): () => T {
  let mtime = -1;
  let checked = -Infinity;
  let value = empty;
  return () => {
    const now = performance.now();
    if (recheckMs > 0 && now - checked < recheckMs) return value;
    checked = now;
    let pinned: PinnedPath | undefined;
    try {
      const file = path();
      // A pinned path (a sandbox's file, pinned-path.ts) has its links resolved already: its
      // final name is not followed, so a link swapped in cannot point the read at a host file.
      pinned = typeof file === "string" ? undefined : file;
      const host = pinned?.host ?? (file as string);
      const m = (pinned ? lstatSync(host) : statSync(host)).mtimeMs;
      if (m !== mtime) {
        value = parsedOnce(parse, readRegularFile(host, MAX_ID_FILE_BYTES, pinned !== undefined));
        mtime = m;
      }
    } catch {
      value = empty;
      mtime = -1;
    } finally {
      pinned?.close();
    }
    return value;
  };
}

/** The last text each parser was given, and its result. Every sandbox of a template has the same
 * /etc/passwd and each has its own cache (its own file), read at its first command: the text is
 * read again (it may differ), the parse is not. The results are shared between sandboxes, so what
 * is shared is frozen (a change one sandbox's caller made would show in another's), and only texts
 * of a real file's size are kept: a tenant's crafted 4 MiB file is parsed for its sandbox alone
 * and goes with it. */
const lastParsed = new WeakMap<(text: string) => unknown, { text: string; value: unknown }>();
const MAX_SHARED_TEXT = 64 << 10;

function parsedOnce<T>(parse: (text: string) => T, text: string): T {
  if (text.length > MAX_SHARED_TEXT) return parse(text);
  const last = lastParsed.get(parse);
  if (last?.text === text) return last.value as T;
  const value = deepFreeze(parse(text));
  lastParsed.set(parse, { text, value });
  return value;
}

/** Arrays and plain objects frozen through; a Map (parseGroup's) has no freeze, so its type says
 * read-only (ReadonlyMap) instead. */
function deepFreeze<T>(value: T): T {
  if (Array.isArray(value)) for (const v of value) deepFreeze(v);
  if (value !== null && typeof value === "object" && !(value instanceof Map)) Object.freeze(value);
  return value;
}

/** /etc/passwd or /etc/group larger than this reads as empty (a real one is a few KiB). */
const MAX_ID_FILE_BYTES = 4 << 20;

/**
 * A file's text, read only if it is a regular file of at most `max` bytes; otherwise a throw. The
 * file is the sandbox's (its /etc/passwd, through the host's view of its root) and the reader the
 * agent's main thread: a FIFO there would block it for good, a device or a huge file would be read
 * whole. Opened without blocking; the type is the open file's. (A sandbox's path comes resolved
 * inside the sandbox, links and all, and pinned: local-view.ts; `noFollow` then refuses a final
 * link swapped in since.)
 */
export function readRegularFile(file: string, max: number, noFollow = false): string {
  const fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK | (noFollow ? constants.O_NOFOLLOW : 0));
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(`${file} is not a regular file`);
    if (st.size > max) throw new Error(`${file} is larger than ${max} bytes`);
    return readFileSync(fd, "utf8");
  } finally {
    closeSync(fd);
  }
}
