#!/usr/bin/env bash
# Build KenLM's lmplz and build_binary from the kenlm sdist on PyPI (they need boost): the
# reference the built-in n-gram estimator is tested against, and `ngram train --estimator
# lmplz` for corpora too large for memory. blockdraft's native search is not built here: the
# package's own build compiles it (setup.py, with the KenLM sources vendored in native/kenlm),
# in place by `make setup`'s editable install, into a wheel by `pip wheel .`.
#
# Results are cached under build/kenlm: a second run with unchanged sources does nothing.
# Outputs:
#   build/kenlm/bin/{lmplz,build_binary}      (also linked into .venv/bin when it exists)
set -euo pipefail
KENLM_VERSION=${KENLM_VERSION:-0.3.0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B="$ROOT/build/kenlm"
PY=${PYTHON:-$ROOT/.venv/bin/python}
JOBS=${JOBS:-$(nproc)}

key="$KENLM_VERSION-$(sha256sum "$0" | cut -c1-16)"
if [ -f "$B/.built-$key" ] && [ -x "$B/bin/lmplz" ]; then
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

# 2. lmplz and build_binary.
cmake -S "$B/src" -B "$B/cmake" -DCMAKE_BUILD_TYPE=Release -DKENLM_MAX_ORDER=6 \
      -DCOMPILE_TESTS=OFF >/dev/null
cmake --build "$B/cmake" -j "$JOBS" --target lmplz build_binary
mkdir -p "$B/bin"
cp "$B/cmake/bin/lmplz" "$B/cmake/bin/build_binary" "$B/bin/"

[ -d "$ROOT/.venv/bin" ] && ln -sf "$B/bin/lmplz" "$B/bin/build_binary" "$ROOT/.venv/bin/"
rm -f "$B"/.built-*; touch "$B/.built-$key"
echo "kenlm: built lmplz and build_binary"
