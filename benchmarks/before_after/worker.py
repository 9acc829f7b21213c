"""One process of the before/after run: SmolLM2 with its packaged heads on ONNX Runtime float32
(one thread), the cost curve pinned from a file (both versions plan with the same curve), and
``decode(model, ids)`` told nothing (the model's default drafter) on every prompt of a JSON
file. One JSON line per prompt on stdout: tokens, verifier calls, wall seconds, the drafter's
name and a digest of the output tokens.

Usage (run by ``benchmarks.before_after``; ``PYTHONPATH`` picks the version):
    python benchmarks/before_after/worker.py PROMPTS.json CURVE.json MAX_NEW_TOKENS
"""

from __future__ import annotations

import hashlib
import json
import sys
import time


def main(prompts_file: str, curve_file: str, max_new: int) -> None:
    import torch

    torch.set_num_threads(1)
    from blockdraft.models import load_model
    from blockdraft.models.cost import CostCurve
    from blockdraft.verify import decode

    model = load_model("smollm2", runtime="onnxruntime", precision="float32", threads=1)
    curve = CostCurve.from_dict(json.loads(open(curve_file).read()))
    try:  # since issue 38: measured curves are kept per model object in one memo
        from blockdraft.models.cost import MEASURED

        MEASURED._curves[model] = curve
    except ImportError:  # before: drafts/default.py pinned the curve on the model itself
        object.__setattr__(model, "_blockdraft_cost_curve", curve)
    cases = json.loads(open(prompts_file).read())
    eos = model.tokenizer.eos_id
    decode(model, cases[0]["ids"][:64], max_new_tokens=16, eos_id=eos)  # warm-up, untimed
    for i, case in enumerate(cases):
        start = time.perf_counter()
        res = decode(model, case["ids"], max_new_tokens=max_new, eos_id=eos)
        wall = time.perf_counter() - start
        digest = hashlib.sha256(json.dumps([int(t) for t in res.tokens]).encode()).hexdigest()
        print(json.dumps({"prompt": i, "tokens": len(res.tokens), "calls": res.calls,
                          "wall_s": wall, "drafter": res.drafter, "out": digest[:16]}),
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
