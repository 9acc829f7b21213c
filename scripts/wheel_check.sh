#!/usr/bin/env bash
# The installable package, checked as a pip user gets it (CI runs it after `make test`):
#   1. the sdist, then the wheel built from it in an isolated build (its build requirements
#      pinned by the lock): the native search compiled from the sdist's vendored KenLM;
#   2. a fresh venv with the lock and that wheel only (scripts/setup_venv.sh WHEEL=...);
#   3. there, outside the clone and without KenLM's tools on PATH: `doctor` (the native search
#      is the wheel's own), `ngram train` (built-in estimator, native binary writer), a tiny
#      model trained and decoded with that LM (lossless, checked against greedy), the
#      rescoring benchmark on the native engine; then the library removed: `doctor` says so
#      and a rescoring warns once, in one line.
#
#   make wheel-check        (OUT=build/wheel-check; about 2-3 minutes on 2 cores)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}                     # the fresh venv's Python
BUILD_PY=${BUILD_PY:-$ROOT/.venv/bin/python}  # runs the build (the lock's pip and setuptools)
OUT=${OUT:-$ROOT/build/wheel-check}
start=$SECONDS
step() { echo "wheel-check: [$((SECONDS - start)) s] $*" >&2; }
fail() { echo "wheel-check: FAILED: $*" >&2; exit 1; }

rm -rf "$OUT"
mkdir -p "$OUT/dist" "$OUT/run"
step "building the sdist and, from it, the wheel"
"$BUILD_PY" -c '
import sys
from setuptools import build_meta
build_meta.build_sdist(sys.argv[1])' "$OUT/dist" >/dev/null
sdist=$(ls "$OUT"/dist/blockdraft-*.tar.gz)
tar -tzf "$sdist" > "$OUT/sdist.txt"
grep -q "native/kenlm/COPYING.LESSER.3" "$OUT/sdist.txt" || fail "the sdist lacks KenLM's licence"
grep -q "/LICENSE$" "$OUT/sdist.txt" || fail "the sdist lacks blockdraft's licence"
grep -q "\.so$" "$OUT/sdist.txt" && fail "the sdist holds a built library"
"$BUILD_PY" -m pip wheel -q --no-deps --build-constraint requirements.lock -w "$OUT/dist" "$sdist"
wheel=$(ls "$OUT"/dist/blockdraft-*.whl)
"$BUILD_PY" - "$wheel" <<'EOF' || fail "the wheel's contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
libs = [n for n in names if n.endswith(".so")]
assert libs == ["blockdraft/_native/libbdkenlm.so"], libs
assert any(n.endswith("licenses/native/kenlm/COPYING.LESSER.3") for n in names), "KenLM licence"
assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "blockdraft's licence"
assert "-py3-none-" in sys.argv[1], sys.argv[1]  # one wheel for every Python 3
EOF
step "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

step "a fresh venv: the lock and the wheel"
VENV="$OUT/venv" WHEEL="$wheel" PYTHON="$PY" bash scripts/setup_venv.sh
V="$OUT/venv/bin"
# outside the clone, only the venv on PATH: nothing of `make setup` can be found
run() { (cd "$OUT/run" && env -u BLOCKDRAFT_KENLM_BIN -u BLOCKDRAFT_NATIVE_LIB \
    PATH="$V:/usr/bin:/bin" "$@"); }
check() {  # check FILE PYTHON-EXPRESSION-OVER-d  (d: the JSON in FILE)
  "$V/python" - "$1" "$2" <<'EOF' || fail "$2 (in $1)"
import json, sys
d = json.load(open(sys.argv[1]))
assert eval(sys.argv[2]), sys.argv[2]
EOF
}

step "doctor"
run "$V/blockdraft" doctor --json > "$OUT/run/doctor.json"
check "$OUT/run/doctor.json" "[p for p in d['parts'] if p['name'] == 'native search'][0]['present']"
check "$OUT/run/doctor.json" \
    "'$OUT/venv/' in [p for p in d['parts'] if p['name'] == 'native search'][0]['detail']"
check "$OUT/run/doctor.json" \
    "not [p for p in d['parts'] if p['name'] == 'lmplz, build_binary'][0]['present']"

step "a tiny model and a 3-gram LM over its tokens (built-in estimator)"
run "$V/python" -c '
from pydoc_data.topics import topics
paras = [" ".join(p.split()) for t in sorted(topics) for p in topics[t].split("\n\n")]
open("corpus.txt", "w").write("\n".join(p for p in paras if p)[:400000] + "\n")'
run "$V/blockdraft" train --corpus corpus.txt -o tiny --preset tiny --steps 30 --batch-size 8 \
    --seq-len 32 --vocab-size 300 --threads 1 --json > "$OUT/run/train.json"
run "$V/blockdraft" ngram train --text corpus.txt --tokenizer tiny --order 3 -o lm3 --json \
    > "$OUT/run/ngram.json"
check "$OUT/run/ngram.json" "d['estimator'] == 'builtin' and d['binary'] and d['counts'][2] > 0"

step "decode with the LM, checked against greedy"
run "$V/blockdraft" decode --model tiny --prompt "The list" --lm lm3.bin --p 4 \
    --max-new-tokens 24 --compare-greedy --threads 1 --json > "$OUT/run/decode.json"

step "the rescoring benchmark (8x16, p = 16) on the native engine"
run "$V/blockdraft" bench rescore --lm lm3.bin --arpa lm3.arpa --h 8 --k 16 --p 16 --n 20 \
    --backends exact --json > "$OUT/run/bench.json" 2>"$OUT/run/bench.err"
check "$OUT/run/bench.json" "'|engine:native|' in d['signature']"
grep -q "warning" "$OUT/run/bench.err" && fail "a warning with the native search: $(cat "$OUT/run/bench.err")"

step "the native library removed: doctor says so, the first rescoring warns once"
lib=$(ls "$OUT"/venv/lib/python*/site-packages/blockdraft/_native/libbdkenlm.so)
mv "$lib" "$OUT/libbdkenlm.so.aside"
run "$V/blockdraft" doctor --json > "$OUT/run/doctor-missing.json"
check "$OUT/run/doctor-missing.json" \
    "not [p for p in d['parts'] if p['name'] == 'native search'][0]['present']"
run "$V/blockdraft" bench rescore --lm lm3.arpa --h 4 --k 4 --p 1,4 --n 3 --backends exact \
    --json > "$OUT/run/bench-python.json" 2>"$OUT/run/bench-python.err"
check "$OUT/run/bench-python.json" "'|engine:kenlm|' in d['signature']"
warned=$(grep -c "^blockdraft: warning: the native p-best search library is missing" \
    "$OUT/run/bench-python.err" || true)
[ "$warned" = 1 ] || fail "expected one warning line, got $warned: $(cat "$OUT/run/bench-python.err")"
mv "$OUT/libbdkenlm.so.aside" "$lib"

step "passed"
