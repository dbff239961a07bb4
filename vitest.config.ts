// Test tiers, one vitest project each (test/README.md says what each needs):
//   unit     pure modules (state machines, schemas, framing) in Node, milliseconds
//   workerd  routes and Durable Objects inside the real Workers runtime, against a real sqld
//   runtime  agent-runtime driven by the real e2b SDK
//   local    the agent and the local driver (real processes, cgroups, bubblewrap)
//   e2e      the whole system started as `npm start` does, driven by the real e2b SDK
// `npm test` (scripts/test.ts) starts sqld and exports LIBSQL_URL before running them.
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

const LIBSQL_URL = process.env.LIBSQL_URL ?? "http://127.0.0.1:8080";

export default defineConfig({
  test: {
    projects: [
      // A busy 2-core machine can stretch a 100,000-step case past vitest's 5 s default.
      { test: { name: "unit", include: ["test/unit/**/*.test.ts"], environment: "node", testTimeout: 20_000 } },
      {
        plugins: [
          cloudflareTest({
            wrangler: { configPath: "./wrangler.toml" },
            remoteBindings: false,
            miniflare: {
              bindings: {
                LIBSQL_URL,
                KEY_PEPPER: "test-pepper",
                SECRETS_KEY: "test-secrets-key-0123456789abcdef0123456789",
                ADMIN_API_KEY: "e2b_00000000000000000000000000000000000000ad",
                CLUSTER_TOKEN: "test-cluster-token",
                // One cluster name only test/workerd/team-clusters.test.ts links: the install's
                // only cluster, which acts for every team without a binding.
                SINGLE_CLUSTER: "the-only-cluster",
                // The clusters whose GlobalTrafficPolicy / GlobalSecurityProfile objects the edge
                // applies (one per test that links one; test/workerd/team-clusters.test.ts).
                GLOBAL_POLICY_CLUSTERS: "policy-gtp, policy-gsp,policy-own,policy-old,policy-bind",
              },
            },
          }),
        ],
        // The first request of a file loads the whole Worker in a fresh isolate: seconds on a busy
        // 2-core machine, so the bound is generous (tests assert behaviour, never time).
        test: { name: "workerd", include: ["test/workerd/**/*.test.ts"], globalSetup: ["test/workerd/global-setup.ts"], testTimeout: 20_000, hookTimeout: 60_000 },
      },
      {
        test: {
          name: "runtime",
          include: ["test/runtime/**/*.test.ts"],
          environment: "node",
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: "local",
          include: ["test/controllers/**/*.test.ts"],
          globalSetup: ["test/support/base-rootfs-setup.ts"],
          environment: "node",
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: "e2e",
          include: ["test/e2e/**/*.test.ts"],
          globalSetup: ["test/support/base-rootfs-setup.ts", "test/e2e/global-setup.ts"],
          environment: "node",
          testTimeout: 60_000,
          hookTimeout: 120_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
