// Durable Object ids by name, kept per isolate. `idFromName` hashes the name every time it is
// asked, and a create asks for about ten ids by the same few names (the team's quota, its pool,
// the sandbox's group, the cluster, the index writer); an id is a plain value, the same for a name
// of a namespace forever, so each is hashed once. Bounded per namespace: names such as team ids
// are not a fixed set.
const ids = new WeakMap<object, Map<string, DurableObjectId>>();
const MAX_PER_NAMESPACE = 10_000;

/** `ns.idFromName(name)`, hashed once per isolate. */
export function idOf(ns: Pick<DurableObjectNamespace, "idFromName">, name: string): DurableObjectId {
  let byName = ids.get(ns);
  if (!byName) ids.set(ns, (byName = new Map()));
  let id = byName.get(name);
  if (!id) {
    id = ns.idFromName(name);
    if (byName.size >= MAX_PER_NAMESPACE) byName.clear();
    byName.set(name, id);
  }
  return id;
}

/** The stub of the object named `name` in `ns`. */
export function stubOf<T extends Rpc.DurableObjectBranded | undefined>(ns: DurableObjectNamespace<T>, name: string): DurableObjectStub<T> {
  return ns.get(idOf(ns, name));
}
