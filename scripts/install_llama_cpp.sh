#!/usr/bin/env bash
# Install llama-cpp-python into .venv: the llama.cpp peers of `python -m benchmarks.bench_real`
# (benchmarks/common/peers.py: greedy and prompt lookup decoding on SmolLM2's GGUF file).
# `make bench-real-peers-setup`.
# Not part of `make setup` or `make test`: pip compiles llama.cpp from the sdist (about 5 minutes
# on a 2-core machine; needs cmake and a C++ compiler, which scripts/install_system_deps.sh
# installs for KenLM). Without it the benchmark reports the llama.cpp peers as not run.
# Versions come from scripts/llama_cpp.lock (llama-cpp-python, its one dependency outside
# requirements.lock, its build backend): nothing is resolved on the machine.
#   CMAKE_ARGS=...                    llama.cpp build options (default: a native CPU build)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
LOCK=scripts/llama_cpp.lock
VERSION=$(grep -E '^llama-cpp-python==' "$LOCK" | cut -d= -f3)
if [ ! -x "$PY" ]; then
  echo "install_llama_cpp: .venv is missing; run 'make setup' first" >&2
  exit 1
fi
if "$PY" -c "import llama_cpp" 2>/dev/null; then
  echo "llama-cpp-python $("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)') is already installed"
  exit 0
fi
for tool in cmake c++; do
  if ! command -v "$tool" >/dev/null; then
    echo "install_llama_cpp: $tool is missing; run 'bash scripts/install_system_deps.sh'" >&2
    exit 1
  fi
done
echo "building llama-cpp-python $VERSION (compiles llama.cpp: a few minutes)..."
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON}" \
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  "$PY" -m pip install -q --no-cache-dir --no-deps --build-constraint "$LOCK" \
    "llama-cpp-python==$VERSION" "$(grep -E '^diskcache==' "$LOCK")"
"$PY" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, 'installed')"
