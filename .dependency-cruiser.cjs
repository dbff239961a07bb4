// Dependencies point one way (docs/ARCHITECTURE.md, "Dependencies"). `npm run lint:deps` checks
// them; `npm test` and CI run it before any test.
//   functions/ → durable-objects/ → schema/        (the edge: routes over objects over shapes)
//   controllers/agent → controllers/drivers, runtime, traffic → schema/   (the agent)
// schema/ and lib/ (small shared utilities) depend on nothing of ours; the agent never imports the edge; drivers never import the
// agent (it wires them, not the other way round).
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "schema-depends-on-nothing",
      comment: "schema/ holds shapes both sides share: it may import only schema/ and packages.",
      severity: "error",
      from: { path: "^schema/" },
      to: { path: "^(functions|durable-objects|controllers|scripts|bench|test)/" },
    },
    {
      name: "lib-depends-on-nothing",
      comment: "lib/ holds small utilities both sides use (concurrency helpers): no product imports.",
      severity: "error",
      from: { path: "^lib/" },
      to: { path: "^(functions|durable-objects|controllers|schema|scripts|bench|test)/" },
    },
    {
      name: "controllers-lib-depends-on-nothing-of-the-agent",
      comment: "controllers/lib/ (the work queue and its backoff) is shared by the agent and the drivers.",
      severity: "error",
      from: { path: "^controllers/lib/" },
      to: { path: "^(controllers/(agent|drivers|runtime|traffic)|functions|durable-objects)/" },
    },
    {
      name: "objects-never-import-routes",
      comment: "Durable Objects sit beneath the routes: operations both call live in durable-objects/operations/.",
      severity: "error",
      from: { path: "^durable-objects/" },
      to: { path: "^functions/" },
    },
    {
      name: "edge-never-imports-the-agent",
      severity: "error",
      from: { path: "^(functions|durable-objects)/" },
      to: { path: "^controllers/" },
    },
    {
      name: "agent-never-imports-the-edge",
      severity: "error",
      from: { path: "^controllers/" },
      to: { path: "^(functions|durable-objects)/" },
    },
    {
      name: "drivers-never-import-the-agent",
      severity: "error",
      from: { path: "^controllers/(drivers|runtime|traffic)/" },
      to: { path: "^controllers/agent/" },
    },
    {
      name: "runtime-and-proxy-never-import-drivers",
      comment: "The runtime reaches a sandbox through a SandboxView; the driver hands it one.",
      severity: "error",
      from: { path: "^controllers/(runtime|traffic)/" },
      to: { path: "^controllers/drivers/" },
    },
    {
      name: "product-never-imports-tests",
      severity: "error",
      from: { path: "^(functions|durable-objects|schema|controllers|lib)/" },
      to: { path: "^(test|bench)/" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "(^|/)(node_modules|dist|\\.wrangler|\\.cache)/" },
    // TypeScript 7 has no JS API yet for dependency-cruiser to parse with; swc reads the sources.
    parser: "swc",
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { extensions: [".ts", ".js", ".d.ts"] },
  },
};
