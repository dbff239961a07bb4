// Parsers for /etc/passwd and /etc/group, the sandbox's own user database.

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

export function parseGroup(text: string): Map<number, string> {
  const out = new Map<number, string>();
  for (const line of text.split("\n")) {
    const f = line.split(":");
    if (f.length < 3 || line.startsWith("#")) continue;
    const gid = Number(f[2]);
    if (Number.isInteger(gid) && !out.has(gid)) out.set(gid, f[0]!);
  }
  return out;
}
