// The Fetch standard's Headers class, for the runtime bundle (bundle.ts injects it where the
// bundle's code, Connect's included, names the global `Headers`). Node's own Headers lives in its
// undici: the first touch of the global loads all of undici and compiles its llhttp WebAssembly
// parser, ~10 MB of RSS and ~60 ms of CPU in a process that never calls fetch (Connect builds a
// Headers for every request it serves). Same behaviour as the standard's: names are
// case-insensitive and validated, values trimmed and validated (TypeError otherwise), appends
// combine with ", " except set-cookie, iteration is sorted by name.

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// NUL, CR, LF, or not a byte (WebIDL's ByteString).
const BAD_VALUE = /[\0\r\n\u0100-\uffff]/;
const EDGE_WS = /^[\t\n\r ]+|[\t\n\r ]+$/g;

function headerName(name: unknown): string {
  const s = String(name);
  if (!TOKEN.test(s)) throw new TypeError(`Headers: invalid header name ${JSON.stringify(s)}`);
  return s.toLowerCase();
}

function headerValue(value: unknown): string {
  const s = String(value).replace(EDGE_WS, "");
  if (BAD_VALUE.test(s)) throw new TypeError("Headers: invalid header value");
  return s;
}

type Init = Iterable<Iterable<string>> | Record<string, string> | WebHeaders;

export class WebHeaders {
  /** lowercased name -> values in append order (combined on read, except set-cookie). */
  readonly #map = new Map<string, string[]>();

  constructor(init?: Init | null) {
    if (init === undefined || init === null) return;
    if (typeof init !== "object" && typeof init !== "function") throw new TypeError("Headers: init must be an object");
    if (Symbol.iterator in init) {
      for (const pair of init as Iterable<Iterable<string>>) {
        if (typeof pair !== "object" || pair === null || !(Symbol.iterator in pair)) throw new TypeError("Headers: each init pair must be a sequence");
        const kv = [...pair];
        if (kv.length !== 2) throw new TypeError("Headers: each init pair must have exactly two items");
        this.append(kv[0]!, kv[1]!);
      }
      return;
    }
    for (const key of Object.keys(init)) this.append(key, (init as Record<string, string>)[key]!);
  }

  append(name: string, value: string): void {
    const n = headerName(name);
    const v = headerValue(value);
    const had = this.#map.get(n);
    if (had) had.push(v);
    else this.#map.set(n, [v]);
  }

  set(name: string, value: string): void {
    this.#map.set(headerName(name), [headerValue(value)]);
  }

  delete(name: string): void {
    this.#map.delete(headerName(name));
  }

  has(name: string): boolean {
    return this.#map.has(headerName(name));
  }

  get(name: string): string | null {
    return this.#map.get(headerName(name))?.join(", ") ?? null;
  }

  getSetCookie(): string[] {
    return [...(this.#map.get("set-cookie") ?? [])];
  }

  forEach(callback: (value: string, name: string, parent: WebHeaders) => void, thisArg?: unknown): void {
    for (const [name, value] of this.entries()) callback.call(thisArg, value, name, this);
  }

  *entries(): IterableIterator<[string, string]> {
    for (const name of [...this.#map.keys()].sort()) {
      const values = this.#map.get(name);
      if (!values) continue;
      if (name === "set-cookie") for (const v of values) yield [name, v];
      else yield [name, values.join(", ")];
    }
  }

  *keys(): IterableIterator<string> {
    for (const [name] of this.entries()) yield name;
  }

  *values(): IterableIterator<string> {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return "Headers";
  }
}

export { WebHeaders as Headers };
