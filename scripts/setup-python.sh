#!/usr/bin/env bash
# Creates .cache/venv with the official e2b Python SDK and pytest, for the Python compatibility
# suite in test/python. Pinned; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .cache/venv/bin/pytest ]]; then
  python3 -m venv .cache/venv
fi
.cache/venv/bin/pip install -q --disable-pip-version-check -r test/python/requirements.txt
