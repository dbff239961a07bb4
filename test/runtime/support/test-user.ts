// The e2b `base` template's default user is `user` with home /home/user; the SDK's own tests
// assert those paths and owners. The tests run as root and create that Linux user if missing.
import { execFileSync } from "node:child_process";

export function ensureTestUser(): void {
  try {
    execFileSync("id", ["user"], { stdio: "ignore" });
  } catch {
    execFileSync("useradd", ["--create-home", "--home-dir", "/home/user", "--shell", "/bin/bash", "user"], { stdio: "ignore" });
  }
}
