// Sandbox user and group ids as the host sees them. The runtime acts on a sandbox's files as the
// host's root (through the sandbox's root at a host path), so a file it creates for a sandbox
// user must be given that user's *host* ids. Without a user namespace the two are the same; a
// sandbox whose 0..65535 is mapped to a host range of its own (issue 11, item 3) changes only
// this module: `toHost` adds the range's start, `toSandbox` takes it away.
export interface IdMapping {
  /** Host uid of the sandbox's 0 (0 without a user namespace). */
  base: number;
  /** How many ids are mapped (the sandbox's 0..size-1). */
  size: number;
}

/** No user namespace: sandbox ids are host ids. */
export const IDENTITY: IdMapping = { base: 0, size: 2 ** 32 };

/** The host id of sandbox id `id` (uid or gid: both ranges are mapped alike). */
export function idToHost(map: IdMapping, id: number): number {
  if (!Number.isInteger(id) || id < 0 || id >= map.size) throw new RangeError(`id ${id} is not mapped in this sandbox (0..${map.size - 1})`);
  return map.base + id;
}

/** The sandbox id of host id `id`, or undefined where the sandbox sees it as unmapped (nobody). */
export function idToSandbox(map: IdMapping, id: number): number | undefined {
  const v = id - map.base;
  return v >= 0 && v < map.size ? v : undefined;
}
