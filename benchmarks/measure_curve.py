"""The cost curve of SmolLM2 with its packaged heads on one runtime, as the cost-aware tree
reads it (:func:`blockdraft.models.cost.measure_cost_curve`), written as JSON.

    .venv/bin/python -m benchmarks.measure_curve [--runtime onnxruntime] [--precision float32]
        [--threads 1] [--repeats 9] -o curve.json

Run it on a quiet machine: every other busy process inflates each size differently. The JSON
(``CostCurve.to_dict``, plus the command and the signature) feeds ``tune_drafting.py --cost``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import torch

    from blockdraft.core.files import write_text_atomic
    from blockdraft.core.signature import environment, format_signature
    from blockdraft.models import load_model
    from blockdraft.models.cost import measure_cost_curve

    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--runtime", default="onnxruntime")
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_model(args.model, runtime=args.runtime, precision=args.precision,
                       threads=args.threads)
    curve = measure_cost_curve(model, repeats=args.repeats)
    fields = {"model": args.model, "runtime": args.runtime, "precision": args.precision,
              "threads": args.threads, "repeats": args.repeats, **environment("cpu")}
    data = {**curve.to_dict(), "command": "python -m benchmarks.measure_curve " + shlex.join(
        sys.argv[1:] if argv is None else argv), "signature": format_signature(fields)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(data, indent=1) + "\n")
    print(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
