#!/usr/bin/env bash
# Build KenLM's lmplz and build_binary, and blockdraft's native exact p-best search library
# (native/kenlm_pbest.cc linked against KenLM), from the kenlm sdist on PyPI.
#
# Results are cached under build/kenlm: a second run with unchanged sources does nothing.
# Outputs:
#   build/kenlm/bin/{lmplz,build_binary}      (also linked into .venv/bin when it exists)
#   src/blockdraft/_native/libbdkenlm.so      (found by blockdraft at import time)
set -euo pipefail
KENLM_VERSION=${KENLM_VERSION:-0.3.0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B="$ROOT/build/kenlm"
PY=${PYTHON:-$ROOT/.venv/bin/python}
NATIVE_SRC="$ROOT/native/kenlm_pbest.cc"
LIB_OUT="$ROOT/src/blockdraft/_native/libbdkenlm.so"
JOBS=${JOBS:-$(nproc)}

key="$KENLM_VERSION-$(sha256sum "$NATIVE_SRC" "$0" | sha256sum | cut -c1-16)"
if [ -f "$B/.built-$key" ] && [ -x "$B/bin/lmplz" ] && [ -f "$LIB_OUT" ]; then
  echo "kenlm: cached ($key)"
  [ -d "$ROOT/.venv/bin" ] && ln -sf "$B/bin/lmplz" "$B/bin/build_binary" "$ROOT/.venv/bin/"
  exit 0
fi
mkdir -p "$B"

# 1. The sdist (pip speaks to the package registry; no other network access is needed).
if [ ! -f "$B/src/CMakeLists.txt" ]; then
  rm -rf "$B/dl" "$B/src"; mkdir -p "$B/dl"
  "$PY" -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
      "kenlm==$KENLM_VERSION" -d "$B/dl"
  mkdir -p "$B/src"
  tar -xzf "$B"/dl/kenlm-*.tar.gz -C "$B/src" --strip-components=1
fi

# 2. lmplz, build_binary and the static KenLM libraries (position independent, for our .so).
cmake -S "$B/src" -B "$B/cmake" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DKENLM_MAX_ORDER=6 -DCOMPILE_TESTS=OFF >/dev/null
cmake --build "$B/cmake" -j "$JOBS" --target lmplz build_binary kenlm kenlm_util
mkdir -p "$B/bin"
cp "$B/cmake/bin/lmplz" "$B/cmake/bin/build_binary" "$B/bin/"

# 3. The native search library.
mkdir -p "$(dirname "$LIB_OUT")"
g++ -O3 -std=c++17 -shared -fPIC -DKENLM_MAX_ORDER=6 -I"$B/src" "$NATIVE_SRC" \
    -Wl,--start-group "$B/cmake/lib/libkenlm.a" "$B/cmake/lib/libkenlm_util.a" -Wl,--end-group \
    -Wl,--no-undefined -lz -lbz2 -llzma -lpthread -o "$LIB_OUT.tmp"
mv "$LIB_OUT.tmp" "$LIB_OUT"

[ -d "$ROOT/.venv/bin" ] && ln -sf "$B/bin/lmplz" "$B/bin/build_binary" "$ROOT/.venv/bin/"
rm -f "$B"/.built-*; touch "$B/.built-$key"
echo "kenlm: built lmplz, build_binary and $LIB_OUT"
