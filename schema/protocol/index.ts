// The edge↔agent protocol in one import; see messages.ts for the session.
export * from "./crd-sync.ts";
export * from "./egress.ts";
export * from "./ids.ts";
export * from "./intent.ts";
export * from "./messages.ts";
export * from "./observation.ts";
export * from "./version.ts";
export * from "./build.ts";
