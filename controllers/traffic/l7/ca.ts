// A sandbox's own certificate authority for HTTPS inspection: made by the agent when the sandbox
// gets an L7 policy, trusted only by that sandbox (its certificate goes into the sandbox's trust
// store), never shared with another sandbox. It signs a short-lived certificate per inspected
// host, which the proxy presents to the sandbox. Keys stay in the agent's memory (and, when a
// directory is given, in a 0600 file of that sandbox's so a restarted agent keeps the CA the
// sandbox trusts). Built with @peculiar/x509 on WebCrypto: no tenant byte reaches a shell.
import { webcrypto } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { isIP } from "node:net";
// @peculiar/x509 resolves its services through tsyringe, which needs the Reflect metadata API.
import "reflect-metadata";
import * as x509 from "@peculiar/x509";

x509.cryptoProvider.set(webcrypto as unknown as Crypto);
const alg = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
const DAY = 86_400_000;
const pem = (label: string, der: ArrayBuffer) => `-----BEGIN ${label}-----\n${Buffer.from(der).toString("base64").replace(/(.{64})/g, "$1\n").trim()}\n-----END ${label}-----\n`;

export interface LeafPem {
  cert: string;
  key: string;
}

/** Leaves kept per sandbox at most (the least recently used go first): their names are the
 * sandbox's choice (each SNI it sends to an inspected pattern), each costs a key and ~45 KiB. */
const MAX_LEAVES = 256;
/** Leaves are valid 7 days from a day back; one made this long ago is made again before use. */
const LEAF_RENEW_MS = 5 * DAY;

export interface CaOptions {
  maxLeaves?: number;
  /** The clock (tests). */
  now?: () => number;
}

export class SandboxCa {
  readonly #keys: CryptoKeyPair;
  readonly #cert: x509.X509Certificate;
  readonly #leaves = new Map<string, { leaf: Promise<LeafPem>; made: number }>();
  readonly #max: number;
  readonly #now: () => number;

  private constructor(keys: CryptoKeyPair, cert: x509.X509Certificate, o: CaOptions = {}) {
    this.#keys = keys;
    this.#cert = cert;
    this.#max = o.maxLeaves ?? MAX_LEAVES;
    this.#now = o.now ?? Date.now;
  }

  /** A new CA for `sandbox`, valid 30 days (a sandbox lives at most days). */
  static async create(sandbox: string, dir?: string, o?: CaOptions): Promise<SandboxCa> {
    const keys = (await webcrypto.subtle.generateKey(alg, true, ["sign", "verify"])) as CryptoKeyPair;
    const cert = await x509.X509CertificateGenerator.createSelfSigned({
      name: `CN=sandbox ${sandbox.replace(/[^A-Za-z0-9-]/g, "")} egress inspection, O=kruise-edge-sandboxes`,
      notBefore: new Date(Date.now() - DAY),
      notAfter: new Date(Date.now() + 30 * DAY),
      keys,
      signingAlgorithm: alg,
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    const ca = new SandboxCa(keys, cert, o);
    if (dir) {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      writeFileSync(join(dir, "ca.key"), pem("PRIVATE KEY", await webcrypto.subtle.exportKey("pkcs8", keys.privateKey as webcrypto.CryptoKey)), { mode: 0o600 });
      writeFileSync(join(dir, "ca.crt"), ca.certPem, { mode: 0o644 });
    }
    return ca;
  }

  /** The CA a previous `create(sandbox, dir)` kept. */
  static async load(dir: string): Promise<SandboxCa> {
    const cert = new x509.X509Certificate(readFileSync(join(dir, "ca.crt"), "utf8"));
    const der = Buffer.from(readFileSync(join(dir, "ca.key"), "utf8").replace(/-----[^-]+-----|\s/g, ""), "base64");
    const privateKey = await webcrypto.subtle.importKey("pkcs8", der, alg, false, ["sign"]);
    const publicKey = await cert.publicKey.export(alg, ["verify"]);
    return new SandboxCa({ privateKey, publicKey } as CryptoKeyPair, cert);
  }

  /** The certificate and key of a CA made here (`create`), to hand to the one proxy that uses it
   * (the kubernetes driver's pod Secret); a loaded CA's key cannot be exported. */
  async pem(): Promise<LeafPem> {
    return { cert: this.certPem, key: pem("PRIVATE KEY", await webcrypto.subtle.exportKey("pkcs8", this.#keys.privateKey as webcrypto.CryptoKey)) };
  }

  /** What the sandbox's trust store gets. */
  get certPem(): string {
    return this.#cert.toString("pem") + "\n";
  }

  /** A certificate for `host` (a DNS name or an IP address) signed by this CA, kept and made
   * again when it nears its end or was dropped for others (at most `maxLeaves` kept). */
  leaf(host: string): Promise<LeafPem> {
    const name = host.toLowerCase();
    const now = this.#now();
    let e = this.#leaves.get(name);
    this.#leaves.delete(name);
    if (!e || now - e.made > LEAF_RENEW_MS) {
      const leaf = this.#makeLeaf(name, now);
      e = { leaf, made: now };
      leaf.catch(() => this.#leaves.get(name)?.leaf === leaf && this.#leaves.delete(name));
    }
    // Most recently used last: the first is the one to drop.
    this.#leaves.set(name, e);
    if (this.#leaves.size > this.#max) this.#leaves.delete(this.#leaves.keys().next().value!);
    return e.leaf;
  }

  async #makeLeaf(host: string, now: number): Promise<LeafPem> {
    const keys = (await webcrypto.subtle.generateKey(alg, true, ["sign", "verify"])) as CryptoKeyPair;
    const cert = await x509.X509CertificateGenerator.create({
      subject: "CN=" + (isIP(host) ? "ip" : host.replace(/[,=+<>#;"\\]/g, "")),
      issuer: this.#cert.subject,
      notBefore: new Date(now - DAY),
      notAfter: new Date(now + 7 * DAY),
      publicKey: keys.publicKey,
      signingKey: this.#keys.privateKey,
      signingAlgorithm: alg,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
        new x509.SubjectAlternativeNameExtension([isIP(host) ? { type: "ip", value: host } : { type: "dns", value: host }]),
        await x509.AuthorityKeyIdentifierExtension.create(this.#keys.publicKey),
      ],
    });
    return { cert: cert.toString("pem") + "\n" + this.certPem, key: pem("PRIVATE KEY", await webcrypto.subtle.exportKey("pkcs8", keys.privateKey as webcrypto.CryptoKey)) };
  }
}
