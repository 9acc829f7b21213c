#!/usr/bin/env bash
# Package SmolLM2's heads with what they draft with (issue 27): the shortlist, the n-gram LM of
# the base's own answers, the acceptance tables and the settings tuned on held-out training
# answers. Every input is a distillation set made by `blockdraft heads distill` (its training
# answers for the shortlist and the LM, its held-out prompts for the tables and the tuning);
# no evaluation prompt is read. Writes into WORK, then replaces the packaged heads folder.
#
#   DISTILL=~/.cache/blockdraft/distill/<key> bash scripts/package_drafting.sh
#
#   SHORTLIST=4096   draft-vocabulary size        ORDER=4        n-gram order
#   PRUNE="0 0 1 1"  lmplz pruning (size)         HELDOUT=120    held-out prompts traced
#   WORK=build/drafting                            HEADS=src/blockdraft/models/hf/heads/smollm2
#   COST=costs.json  the runtime's cost curve the tuning prices trees by (a CostCurve JSON,
#                    e.g. from benchmarks/bench_costs.py --curve; default: the committed
#                    benchmarks/results/costs run plus 1 ms for the heads)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
BD=".venv/bin/blockdraft"
: "${DISTILL:?set DISTILL to a distillation set (blockdraft heads distill --folder, or its cache key folder)}"
SHORTLIST=${SHORTLIST:-4096}
ORDER=${ORDER:-4}
PRUNE=${PRUNE:-"0 0 1 1"}
HELDOUT=${HELDOUT:-120}
WORK=${WORK:-build/drafting}
HEADS=${HEADS:-src/blockdraft/models/hf/heads/smollm2}
mkdir -p "$WORK"

echo "1. the shortlist ($SHORTLIST tokens of the training answers) beside the heads" >&2
$BD heads package "$HEADS" --data "$DISTILL" --shortlist "$SHORTLIST" -o "$WORK/heads-shortlist" \
  --overwrite

echo "2. the n-gram LM of the training answers (order $ORDER, pruned $PRUNE)" >&2
# shellcheck disable=SC2086
$BD ngram train --distilled "$DISTILL" --tokenizer smollm2 --order "$ORDER" --prune $PRUNE \
  -o "$WORK/answers$ORDER" --overwrite

echo "3. a trace of the held-out prompts, on the heads with their shortlist" >&2
$PY - "$DISTILL" "$HELDOUT" "$WORK/heldout_ids.txt" <<'EOF'
import sys
from blockdraft.training.heads import open_distill_set
from blockdraft.training.heads.shards import read_shard
dset = open_distill_set(sys.argv[1])
n = int(sys.argv[2])
with open(sys.argv[3], "w") as f:
    for name in dset.shards("heldout"):
        shard = read_shard(dset.shard_path(name))
        for p in range(shard.num_prompts):
            if n == 0:
                break
            f.write(" ".join(map(str, shard.prompt(p))) + "\n")
            n -= 1
EOF
$BD trace --model "$WORK/heads-shortlist" --runtime onnxruntime --threads 1 \
  --prompts "$WORK/heldout_ids.txt" --ids -o "$WORK/trace-heldout" --max-new-tokens 128 \
  --K 32 --overwrite

echo "4. the acceptance tables and the settings, tuned on that trace" >&2
$PY -m benchmarks.tune_drafting --trace "$WORK/trace-heldout" --lm "answers=$WORK/answers$ORDER.bin" \
  ${COST:+--cost "$COST"} --out benchmarks/results/tune --recipe "$WORK/recipe"

echo "5. the packaged heads: shortlist, LM, tables, settings" >&2
$BD heads package "$WORK/heads-shortlist" --ngram "$WORK/answers$ORDER.bin" \
  --acceptance "$WORK/recipe/acceptance.json" --recipe "$WORK/recipe/recipe.json" \
  -o "$WORK/heads-packaged" --overwrite
rm -rf "$HEADS.old"
mv "$HEADS" "$HEADS.old"
cp -r "$WORK/heads-packaged" "$HEADS"
rm -rf "$HEADS.old"
echo "packaged: $HEADS" >&2
