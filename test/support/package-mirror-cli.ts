// The package mirror stand-in (package-mirror.ts) for test runners in other languages: starts it
// with one package of each kind named after the tag given, prints one JSON line (the mirror's
// addresses and the packages' names), and stops it when stdin closes. Used by
// test/python/system/test_template_build.py.
//   node test/support/package-mirror-cli.ts <tag: [a-z0-9]{1,16}>
import { startPackageMirror } from "./package-mirror.ts";

const tag = process.argv[2] ?? "";
if (!/^[a-z0-9]{1,16}$/.test(tag)) {
  console.error("usage: package-mirror-cli.ts <tag: [a-z0-9]{1,16}>");
  process.exit(2);
}
const mirror = await startPackageMirror();
const deb = `hello-py-${tag}`;
const wheel = `py_pkg_${tag}`;
const npm = `py-npm-${tag}`;
mirror.addDeb({ name: deb, version: "1.4", script: `echo "deb ${tag} as $(id -un)"` });
mirror.addWheel({ name: wheel, version: "0.3", module: `VALUE = "wheel ${tag}"\n` });
mirror.addNpm({ name: npm, version: "2.0.0", main: `module.exports = "npm ${tag}";\n` });
const repo = mirror.addGitRepo({ name: `repo-${tag}`, files: { "README.md": `git ${tag}\n` } });
console.log(JSON.stringify({ ip: mirror.ip, aptSource: mirror.aptSource, pipIndex: mirror.pipIndex, npmRegistry: mirror.npmRegistry, repo, deb, wheel, npm }));
process.stdin.on("end", () => {
  mirror.stop();
  process.exit(0);
});
process.stdin.resume();
