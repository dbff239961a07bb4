// File metadata (X-Metadata-* on upload, EntryInfo.metadata on reads). envd keeps it in
// `user.e2b.*` xattrs; Node has no xattr call, so the runtime keeps it in memory, keyed by the
// file's identity (device, inode, birth time) so a rename keeps it and a new file reusing the
// inode does not inherit it. It does not survive a runtime restart.
import type { BigIntStats } from "node:fs";

type Identity = Pick<BigIntStats, "dev" | "ino" | "birthtimeNs">;

export class MetadataStore {
  #byFile = new Map<string, Record<string, string>>();

  #key(st: Identity): string {
    return `${st.dev}:${st.ino}:${st.birthtimeNs}`;
  }

  get(st: Identity): Record<string, string> {
    return this.#byFile.get(this.#key(st)) ?? {};
  }

  /** Replaces the file's metadata; an empty map clears it (envd's upload semantics). */
  set(st: Identity, metadata: Record<string, string>): void {
    if (Object.keys(metadata).length) this.#byFile.set(this.#key(st), metadata);
    else this.#byFile.delete(this.#key(st));
  }
}
