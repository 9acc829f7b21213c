#!/usr/bin/env bash
# GPU check, issue 30's figures in one command, about 5-8 minutes on a lent GPU machine (no
# network). Every stage has its own time limit, so one that hangs costs only its own.
#   0. env.txt: the machine; wheels carried in .gpu-wheels/ are installed (--target /tmp/site),
#      and SmolLM2's GGUF, carried in parts (.gpu-part1/ .gpu-part2/ ..., scripts/gpu_bundle.sh
#      writes them here), is joined and its SHA-256 checked: then the end-to-end rows use the
#      real weights (or BLOCKDRAFT_GPU_MODEL=path names them).
#   1. tests.txt: the CUDA tests on tiny random models (PyTorch on CUDA: decode, trees, caches,
#      training), the static runtime's tests with its CUDA-graph capture
#      (tests/models/runtimes/test_static.py) and the other runtime tests on the machine's
#      onnxruntime;
#   2. costs.{json,md}: the eager verification cost curve per precision (benchmarks.bench_costs:
#      chains, trees, whole verification calls, expected speedups B x greedy / verify[N]);
#   3. issue 41 (log.txt): decode's default drafter on CUDA with the real weights, both head
#      kinds, bfloat16 and float32 (benchmarks.bench_static_host --strategy default: outputs
#      against the runtime's own greedy, B, the step's split), and the host's time per step with
#      a null forward (--null-forward: every drafter; the issue's target <= 0.15 ms outside the
#      replay); the CUDA rows of tests/verify/test_default_on_devices.py run in stage 1;
#   3b. issue 41 item 1 (log.txt): the whole decode step on the device with the real weights and
#      the packaged Medusa heads, bfloat16 and float32 (benchmarks.bench_device_step: greedy
#      through the runtime's graphs against greedy, vanilla heads and Medusa's static trees of 16
#      and 64 nodes on the device, one CUDA graph a step, and the same drafters on the host
#      path: tokens/s, speedup over the graph greedy, B, outputs identical to it, device and
#      host ms per step; and item 2's device drafters on the device: the rated tree with N = 16
#      and 32 from acceptance.json, with the n-gram LM's evidence when answers4.arpa lies beside
#      answers4.bin, prompt lookup, vanilla + lookup); the CPU-tested device-step tests run on
#      CUDA in stage 1;
#   4. gpu.{json,md,png}: python -m benchmarks.bench_gpu: the cost curve eager against the static
#      runtime and its CUDA graphs (bf16 and fp32) with the issue's three targets, the decode loop
#      end to end (greedy, vanilla heads, prompt lookup, 8-best trie: speedup over the runtime's
#      own greedy against B; real weights, else "replay" rows from benchmarks/replay/*.json) and
#      transformers' generate beside it (dynamic cache, static cache, + torch.compile, prompt
#      lookup).
# Results land in $OUT (8 files, the most that come back): env.txt, tests.txt, costs.json,
# costs.md, gpu.json, gpu.md, gpu.png, log.txt.
#   OUT=out/gpu bash scripts/gpu_check.sh
#   GPU_CHECK_SKIP="costs gpu" OUT=out/gpu bash scripts/gpu_check.sh   # stages 0, 1, 3 only
#   GPU_CHECK_SKIP="costs issue41 gpu" OUT=out/gpu bash scripts/gpu_check.sh   # the device step
# GPU_CHECK_SKIP names stages to leave out: costs (2), issue41 (3), device (3b), gpu (4).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: >"$LOG"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
stage() { echo "== [$SECONDS s] $*" | tee -a "$LOG"; }
skipped() { case " ${GPU_CHECK_SKIP:-} " in *" $1 "*) echo "(skipped: GPU_CHECK_SKIP)" | tee -a "$LOG"; return 0;; esac; return 1; }

stage "0. environment"
if compgen -G ".gpu-wheels/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu-wheels/*.whl >>"$LOG" 2>&1 && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
if [ -z "${BLOCKDRAFT_GPU_MODEL:-}" ] && [ -f .gpu-part1/manifest.txt ]; then
  read -r sha name <.gpu-part1/manifest.txt
  mkdir -p /tmp/smollm2
  cat .gpu-part*/"$name".part* >"/tmp/smollm2/$name"
  if echo "$sha  /tmp/smollm2/$name" | sha256sum -c --quiet - >>"$LOG" 2>&1; then
    export BLOCKDRAFT_GPU_MODEL="/tmp/smollm2/$name"
  else
    echo "the GGUF's parts do not join to the recorded SHA-256 (a part missing?): replay" | tee -a "$LOG"
  fi
fi
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  echo "real weights: ${BLOCKDRAFT_GPU_MODEL:-none (end to end: replay)}"
  "$PY" - <<'PYEOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__,
      "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
for name in ("transformers", "onnxruntime", "onnx", "numpy", "hypothesis", "gguf"):
    try:
        mod = __import__(name)
        print(name, getattr(mod, "__version__", "?"))
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

stage "1. tests"
timeout 150 "$PY" -m pytest -q -p no:cacheprovider -m cuda -rs \
  tests/models/test_cuda.py tests/models/hf/test_hf_decode.py tests/models/hf/test_hf_tree.py \
  tests/verify/test_decode.py tests/rescorers/test_neural.py \
  tests/verify/test_default_on_devices.py tests/models/runtimes/test_device_drafts.py \
  tests/models/runtimes/test_device_step.py tests/models/runtimes/test_device_strategies.py \
  >"$OUT/tests.txt" 2>&1
echo "cuda tests: exit $?" | tee -a "$OUT/tests.txt"
timeout 40 "$PY" -m pytest -q -p no:cacheprovider -rs tests/models/runtimes/test_static.py \
  -k captured >>"$OUT/tests.txt" 2>&1
echo "static runtime CUDA-graph tests: exit $?" | tee -a "$OUT/tests.txt"
timeout 120 "$PY" -m pytest -q -p no:cacheprovider -x -rs tests/models/runtimes \
  >>"$OUT/tests.txt" 2>&1
echo "runtime tests (static, onnxruntime): exit $?" | tee -a "$OUT/tests.txt"
tail -n 15 "$OUT/tests.txt"

stage "2. eager cost curve (bench_costs.py)"
if ! skipped costs; then
  timeout 100 "$PY" -m benchmarks.bench_costs --shape smollm2 --device cuda \
    --variants torch:float32,torch:bfloat16,torch:float16 --repeats 10 --out "$OUT" \
    >>"$LOG" 2>&1
  echo "eager cost curve: exit $?" | tee -a "$LOG"
  rm -f "$OUT/costs.png"  # 8 files come back; gpu.png draws the curves
fi

stage "3. issue 41: the default drafter on CUDA (real weights), the host's time per step"
if ! skipped issue41; then
  if [ -n "${BLOCKDRAFT_GPU_MODEL:-}" ]; then
    for dtype in bfloat16 float32; do
      for heads in smollm2 smollm2-prefix; do
        timeout 75 "$PY" -m benchmarks.bench_static_host --model "$BLOCKDRAFT_GPU_MODEL" \
          --heads "src/blockdraft/models/hf/heads/$heads" --device cuda --dtype "$dtype" \
          --strategy default --max-new-tokens 64 --repeats 1 --out "/tmp/host-$dtype-$heads" \
          >>"$LOG" 2>&1
        echo "default drafter, $dtype, $heads heads: exit $?" | tee -a "$LOG"
      done
    done
    timeout 100 "$PY" -m benchmarks.bench_static_host --model "$BLOCKDRAFT_GPU_MODEL" \
      --heads src/blockdraft/models/hf/heads/smollm2 --device cuda --dtype bfloat16 \
      --null-forward --max-new-tokens 64 --repeats 1 --out /tmp/host-null >>"$LOG" 2>&1
    echo "host time per step, null forward (bfloat16, every drafter): exit $?" | tee -a "$LOG"
  else
    echo "no real weights: the tiny models' CUDA rows of stage 1 only" | tee -a "$LOG"
  fi
fi

stage "3b. issue 41: the whole decode step on the device (real weights, Medusa heads)"
if ! skipped device; then
  if [ -n "${BLOCKDRAFT_GPU_MODEL:-}" ]; then
    timeout 260 "$PY" -m benchmarks.bench_device_step --model "$BLOCKDRAFT_GPU_MODEL" \
      --heads src/blockdraft/models/hf/heads/smollm2 --device cuda --dtype bfloat16 \
      --dtype float32 --prompts 4 --max-new-tokens 128 --out /tmp/device >>"$LOG" 2>&1
    echo "device step (bench_device_step): exit $? (124: its time limit)" | tee -a "$LOG"
  else
    echo "no real weights: the tiny models' device-step rows of stage 1 only" | tee -a "$LOG"
  fi
fi

stage "4. bench_gpu.py: cost curve eager vs graphs, end to end, transformers' generate"
if ! skipped gpu; then
  timeout "${BENCH_GPU_TIMEOUT:-270}" "$PY" -m benchmarks.bench_gpu --device cuda --out "$OUT" \
    >>"$LOG" 2>&1
  echo "bench_gpu: exit $? (124: its time limit; gpu.md keeps what it measured)" | tee -a "$LOG"
fi
stage "done"
tail -n 60 "$OUT/gpu.md" 2>/dev/null
