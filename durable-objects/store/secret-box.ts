// Secret values at rest: AES-256-GCM under a key derived (HKDF-SHA256) from the Worker's
// SECRETS_KEY, a fresh 12-byte IV per value, and the row's identity (team, secret, version) as
// additional data, so a sealed value copied to another row or team does not open.
const enc = new TextEncoder();
const dec = new TextDecoder();
const VERSION = "v1.";
/** Shorter keys are refused rather than stretched: the key is the whole protection at rest. */
export const MIN_SECRETS_KEY_LENGTH = 32;

const keys = new Map<string, Promise<CryptoKey>>();

function keyOf(secretsKey: string): Promise<CryptoKey> {
  let k = keys.get(secretsKey);
  if (!k) {
    k = (async () => {
      const root = await crypto.subtle.importKey("raw", enc.encode(secretsKey), "HKDF", false, ["deriveKey"]);
      return crypto.subtle.deriveKey(
        { name: "HKDF", hash: "SHA-256", salt: new Uint8Array(0), info: enc.encode("e2b secrets at rest v1") },
        root,
        { name: "AES-GCM", length: 256 },
        false,
        ["encrypt", "decrypt"],
      );
    })();
    keys.set(secretsKey, k);
  }
  return k;
}

export interface SealedFor {
  teamId: string;
  secretId: string;
  version: number;
}

const aad = (f: SealedFor) => enc.encode(`${f.teamId}\n${f.secretId}\n${f.version}`);

export async function seal(secretsKey: string, plain: string, f: SealedFor): Promise<string> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const ct = new Uint8Array(await crypto.subtle.encrypt({ name: "AES-GCM", iv, additionalData: aad(f) }, await keyOf(secretsKey), enc.encode(plain)));
  const out = new Uint8Array(iv.length + ct.length);
  out.set(iv);
  out.set(ct, iv.length);
  return VERSION + btoa(String.fromCharCode(...out));
}

/** Throws when the value was sealed under another key or for another row. */
export async function open(secretsKey: string, sealed: string, f: SealedFor): Promise<string> {
  if (!sealed.startsWith(VERSION)) throw new Error("sealed secret: unknown format");
  const bytes = Uint8Array.from(atob(sealed.slice(VERSION.length)), (c) => c.charCodeAt(0));
  const plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv: bytes.subarray(0, 12), additionalData: aad(f) }, await keyOf(secretsKey), bytes.subarray(12));
  return dec.decode(plain);
}
