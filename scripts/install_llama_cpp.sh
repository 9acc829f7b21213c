#!/usr/bin/env bash
# Install llama-cpp-python into .venv: the llama.cpp peers of benchmarks/bench_real.py
# (greedy and prompt lookup decoding on SmolLM2's GGUF file). `make bench-real-peers-setup`.
# Not part of `make setup` or `make test`: pip compiles llama.cpp from the sdist (about 5 minutes
# on a 2-core machine; needs cmake and a C++ compiler, which scripts/install_system_deps.sh
# installs for KenLM). Without it the benchmark reports the llama.cpp peers as not run.
#   LLAMA_CPP_PYTHON_VERSION=0.3.36   the version to install (pinned: its API is the one used)
#   CMAKE_ARGS=...                    llama.cpp build options (default: a native CPU build)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
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
  "$PY" -m pip install -q --no-cache-dir "llama-cpp-python==$VERSION"
"$PY" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, 'installed')"
