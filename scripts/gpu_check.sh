#!/usr/bin/env bash
# GPU readiness, in under 5 minutes on a lent GPU machine (no network, no SmolLM2 weights):
#   1. the CUDA tests on tiny random models (PyTorch on CUDA: decode, trees, caches, training),
#      and the ONNX Runtime tests on the machine's own onnxruntime;
#   2. the verification cost curve of a randomly initialised model of SmolLM2-135M's exact
#      shape on the GPU (forward ms at N = 1..64 for chains and token trees, a whole
#      verification call, a greedy step; float32, bfloat16, float16): cost does not depend on
#      the weights, and B does not depend on the device, so the README states the expected
#      GPU speedup of each strategy as B x greedy / verify[N] (labelled as an estimate).
# Results land in $OUT (at most 8 files): env.txt, tests.txt, costs.{json,md,png}, costs.log.
#   OUT=out/gpu bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  "$PY" - <<'PYEOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__,
      "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
for name in ("transformers", "onnxruntime", "onnx", "numpy", "hypothesis"):
    try:
        mod = __import__(name)
        print(name, mod.__version__)
    except ImportError as e:
        print(name, "missing:", e)
try:
    import onnxruntime
    print("onnxruntime providers", onnxruntime.get_available_providers())
except ImportError:
    pass
PYEOF
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

timeout 120 "$PY" -m pytest -q -p no:cacheprovider -m cuda -rs \
  tests/models/test_cuda.py tests/models/hf/test_hf_decode.py tests/models/hf/test_hf_tree.py \
  tests/verify/test_decode.py tests/rescorers/test_neural.py >"$OUT/tests.txt" 2>&1
echo "cuda tests: exit $?" | tee -a "$OUT/tests.txt"
timeout 60 "$PY" -m pytest -q -p no:cacheprovider -x tests/models/runtimes >>"$OUT/tests.txt" 2>&1
echo "onnxruntime tests: exit $?" | tee -a "$OUT/tests.txt"
tail -n 15 "$OUT/tests.txt"

timeout 180 "$PY" benchmarks/bench_costs.py --shape smollm2 --device cuda \
  --variants torch:float32,torch:bfloat16,torch:float16 --repeats 20 --out "$OUT" \
  >"$OUT/costs.log" 2>&1
echo "cost curve: exit $?"
tail -n 40 "$OUT/costs.log"
