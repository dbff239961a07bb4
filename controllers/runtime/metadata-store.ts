// File metadata (X-Metadata-* on upload, EntryInfo.metadata on reads) lives where envd keeps it:
// `user.e2b.<key>` extended attributes on the file itself, so metadata set inside the sandbox
// (`setfattr -n user.e2b.k -v v f`, Python's os.setxattr) shows in the API and the other way
// round, and it survives runtime restarts. Node has no xattr call; @napi-rs/xattr (a prebuilt
// binary from the registry) makes the syscalls. Key and value are only syscall data, and its
// calls never follow a final symlink (l*xattr), so a link swapped in cannot point them at a host
// file. Where a file system refuses user xattrs (ENOTSUP: some tmpfs builds, NFS) the metadata
// falls back to memory, keyed by the file's identity (device, inode, birth time), and is lost on
// restart; `fallbacks` counts those files.
import type { BigIntStats } from "node:fs";

// Loaded on first use: the addon is a shared library to map, and the runtime's start (every
// sandbox's store is made before it listens) does not need it.
let addon: Promise<typeof import("@napi-rs/xattr")> | undefined;
const xattr = () => (addon ??= import("@napi-rs/xattr"));

const PREFIX = "user.e2b.";

type Identity = Pick<BigIntStats, "dev" | "ino" | "birthtimeNs">;

function unsupported(err: unknown): boolean {
  return /os error 95\b|not supported/i.test((err as Error).message ?? "");
}

export class MetadataStore {
  #byFile = new Map<string, Record<string, string>>();
  /** Files whose metadata is kept in memory because their file system has no user xattrs. */
  fallbacks = 0;
  readonly #syncReads: boolean;

  /** `syncReads`: read attributes with the blocking calls, on the event loop, not as a task of
   * the thread pool each (a listing of 2,000 entries is 2,000 of them: 578 -> 440 ms through the
   * SDK, s12). Only for a runtime that serves this one sandbox (a pod's, `single`): a file system
   * of the sandbox's that never answers (a FUSE mount) then stalls only that sandbox's runtime,
   * where a runtime embedded in the agent would stall every sandbox it serves. */
  constructor(opts: { syncReads?: boolean } = {}) {
    this.#syncReads = opts.syncReads ?? false;
  }

  #key(st: Identity): string {
    return `${st.dev}:${st.ino}:${st.birthtimeNs}`;
  }

  /** The file's `user.e2b.*` attributes (none for what cannot carry them: links, /proc). */
  async get(host: string, st: Identity & { isSymbolicLink(): boolean }): Promise<Record<string, string>> {
    const kept = this.#byFile.get(this.#key(st));
    if (kept) return kept;
    if (st.isSymbolicLink()) return {};
    const out: Record<string, string> = {};
    try {
      const x = await xattr();
      const sync = this.#syncReads;
      for (const name of sync ? x.listAttributesSync(host) : await x.listAttributes(host)) {
        if (!name.startsWith(PREFIX)) continue;
        const value = sync ? x.getAttributeSync(host, name) : await x.getAttribute(host, name);
        if (value) out[name.slice(PREFIX.length)] = value.toString("utf8");
      }
    } catch {
      // No attributes to read here (a file system without them, a vanished file).
    }
    return out;
  }

  /** Replaces the file's metadata; an empty map clears it (envd's upload semantics). */
  async set(host: string, st: Identity, metadata: Record<string, string>): Promise<void> {
    const { listAttributes, removeAttribute, setAttribute } = await xattr();
    try {
      for (const name of await listAttributes(host)) if (name.startsWith(PREFIX)) await removeAttribute(host, name);
      for (const [k, v] of Object.entries(metadata)) await setAttribute(host, PREFIX + k, v);
      this.#byFile.delete(this.#key(st));
    } catch (err) {
      if (!unsupported(err)) throw err;
      if (Object.keys(metadata).length) {
        if (!this.#byFile.has(this.#key(st))) this.fallbacks++;
        this.#byFile.set(this.#key(st), metadata);
      } else this.#byFile.delete(this.#key(st));
    }
  }
}
