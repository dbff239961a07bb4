// The cluster ingress client lives with the objects (they call runtimes too); the gateway's name for it.
export { edgeFetch, forgetIngress, ingressUrl, readBoundedText, signingKey, type EdgeCall } from "../../durable-objects/ingress-client.ts";
