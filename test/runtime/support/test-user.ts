// The e2b `base` template's default user is `user` with home /home/user; the SDK's own tests
// assert those paths and owners. The tests run as root and create that Linux user if missing.
import { execFileSync } from "node:child_process";

function exists(): boolean {
  try {
    execFileSync("id", ["user"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

export function ensureTestUser(): void {
  if (exists()) return;
  try {
    execFileSync("useradd", ["--create-home", "--home-dir", "/home/user", "--shell", "/bin/bash", "user"], { stdio: "ignore" });
  } catch (err) {
    // Test files run in parallel workers; another one may have just created it.
    if (!exists()) throw err;
  }
}
