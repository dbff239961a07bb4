// A direct build (builder/direct-build.ts) in a process of its own, for tests that kill it: the
// build as JSON in argv[2]; each log line to stdout as it comes, the result as the last line.
import { runDirectBuild, type DirectBuild } from "../../controllers/drivers/local/builder/direct-build.ts";

const b = JSON.parse(process.argv[2]!) as DirectBuild;
const r = await runDirectBuild(b, (l) => console.log(l.message));
console.log(JSON.stringify(r));
