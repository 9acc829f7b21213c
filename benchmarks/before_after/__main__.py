"""The default drafter's tokens/s, B and outputs, the code of two versions interleaved.

    python -m benchmarks.before_after --before OLD/src --after src --out DIR [--rounds 3]

Both versions decode bench-real's 12 chat prompts (400 prompt tokens, seed 0) for 128 new
tokens with ``decode(model, ids)`` told nothing, on SmolLM2 with its packaged heads, ONNX Runtime
float32, one thread. The cost curve is measured once (by the ``--after`` code) and pinned for
both, so they plan the same trees. Rounds alternate which version runs first; the speed quoted
is the median over rounds of each version's tokens/s (total tokens / total wall). Outputs and
verifier calls must be identical (the same drafter, exact): the report says whether they are.

Writes ``DIR/before_after.json`` (runs, summary, signature) and ``DIR/README.md``. Run it on a
quiet machine (nothing else busy: two cores).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("worker.py")
PROMPTS = ("import json,sys\nfrom blockdraft.models import load_tokenizer\n"
           "from benchmarks.common.real_model import build_cases\n"
           "tok=load_tokenizer('smollm2')\n"
           "cases=build_cases(tok,['chat'],12,400,seed=0,per_task={'chat':12})\n"
           "json.dump([{'task':c.task,'id':c.id,'ids':[int(t) for t in c.ids]} for c in cases],"
           "open(sys.argv[1],'w'))\n")
CURVE = ("import json,sys,torch\ntorch.set_num_threads(1)\n"
         "from blockdraft.models import load_model\n"
         "from blockdraft.models.cost import measure_cost_curve\n"
         "m=load_model('smollm2',runtime='onnxruntime',precision='float32',threads=1)\n"
         "c=measure_cost_curve(m,nodes=(1,2,4,8,16,32),repeats=7)\n"
         "open(sys.argv[1],'w').write(json.dumps(c.to_dict()))\n")


def _python(code_or_file: list[str], src: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.getcwd()]),
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *code_or_file], capture_output=True, text=True,
                          env=env)


def _checked(res: subprocess.CompletedProcess[str], what: str) -> str:
    if res.returncode:
        sys.exit(f"{what} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    return res.stdout


def _summary(runs: list[dict[str, Any]], label: str) -> dict[str, Any]:
    mine = [r for r in runs if r["code"] == label]
    speeds = [sum(x["tokens"] for x in r["rows"]) / sum(x["wall_s"] for x in r["rows"])
              for r in mine]
    rows = mine[0]["rows"]
    return {"tokens_per_s_median": statistics.median(speeds), "tokens_per_s": speeds,
            "B": sum(x["tokens"] for x in rows) / sum(x["calls"] for x in rows),
            "outputs": [x["out"] for x in rows], "calls": [x["calls"] for x in rows],
            "drafter": rows[0]["drafter"]}


def _git(src: str) -> str:
    res = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    return res.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.before_after",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the old version's src folder")
    ap.add_argument("--after", required=True, help="the new version's src folder")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--title", default="before / after")
    args = ap.parse_args(argv)
    from blockdraft.core.signature import cpu_flags, environment, format_signature

    args.out.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.TemporaryDirectory()  # the prompts' token ids: shared data, not kept
    prompts, curve = Path(scratch.name) / "prompts.json", args.out / "curve.json"
    _checked(_python(["-c", PROMPTS, str(prompts)], args.after), "the prompts")
    if not curve.exists():
        _checked(_python(["-c", CURVE, str(curve)], args.after), "the cost curve")
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        order = [("before", args.before), ("after", args.after)]
        for label, src in (order[::-1] if r % 2 else order):
            out = _checked(_python([str(WORKER), str(prompts), str(curve),
                                    str(args.max_new_tokens)], src), f"round {r} {label}")
            rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            runs.append({"round": r, "code": label, "rows": rows})
            tokens = sum(x["tokens"] for x in rows)
            print(f"round {r} {label}: {tokens / sum(x['wall_s'] for x in rows):.2f} tokens/s, "
                  f"B {tokens / sum(x['calls'] for x in rows):.3f}", flush=True)
    before, after = _summary(runs, "before"), _summary(runs, "after")
    signature = {"model": "smollm2", "runtime": "onnxruntime", "precision": "float32",
                 "threads": 1, "prompts": "bench-real chat x12 (400 tokens, seed 0)",
                 "prompt_ids": hashlib.sha256(prompts.read_bytes()).hexdigest()[:16],
                 "max_new_tokens": args.max_new_tokens, "rounds": args.rounds,
                 "before": _git(args.before), "after": _git(args.after),
                 **environment()}
    result = {"title": args.title, "command": "python -m benchmarks.before_after " +
              " ".join(argv if argv is not None else sys.argv[1:]),
              "before": before, "after": after,
              "ratio": after["tokens_per_s_median"] / before["tokens_per_s_median"],
              "same_outputs": before["outputs"] == after["outputs"],
              "same_calls": before["calls"] == after["calls"],
              "signature": format_signature(signature), "cpu_flags": " ".join(cpu_flags()),
              "curve": json.loads(curve.read_text()), "runs": runs}
    (args.out / "before_after.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# {args.title}", "", f"Command: `{result['command']}`", "",
             f"Signature: `{result['signature']}`", "", f"CPU flags: `{result['cpu_flags']}`",
             "", "| code | drafter | B | tokens/s (median) | tokens/s (rounds) |",
             "|---|---|---|---|---|"]
    for label, s in (("before", before), ("after", after)):
        lines.append(f"| {label} ({signature[label]}) | {s['drafter']} | {s['B']:.3f} | "
                     f"{s['tokens_per_s_median']:.2f} | "
                     f"{', '.join(f'{x:.2f}' for x in s['tokens_per_s'])} |")
    lines += ["", f"after / before: **{result['ratio']:.3f}**; identical outputs: "
              f"{result['same_outputs']}; identical verifier calls: {result['same_calls']}.", ""]
    (args.out / "README.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
