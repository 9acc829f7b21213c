"""The whole decode step on the device against the graph greedy (issue 41, item 1): tokens/s.

    python -m benchmarks.bench_device_step --model GGUF \\
        --heads src/blockdraft/models/hf/heads/smollm2 --device cuda \\
        --dtype bfloat16 --dtype float32 --out OUT          # on a GPU (scripts/gpu_check.sh)
    python -m benchmarks.bench_device_step --tiny --out /tmp/device    # a CPU smoke run

For each precision the model is loaded on the static runtime (on CUDA: one graph per bucket;
the device steps one graph per (topology, rows attended)) and decodes the chat requests
(``--prompts`` of :data:`benchmarks.common.replay.PROMPTS`, ``--max-new-tokens`` each, the
exact criterion) with:

- greedy (graph): ``greedy_generate`` on the runtime (its T = 1 graph): the baseline;
- greedy (device step): the one-node tree on the device (the T = 1 bucket of the device step);
- vanilla heads and Medusa's static trees (16 nodes; 64 nodes, Medusa's ``mc_sim_7b_63``, when
  the heads reach depth 4) on the host path (decode's drafter, lattice and verifier) and with
  the whole step on the device (:mod:`blockdraft.models.runtimes.device_step`, through decode
  with ``device_steps``);
- the device drafters of issue 41 item 2, on the device only (:mod:`blockdraft.models.runtimes.
  device_drafters`): the rated tree with N fixed (16 and 32 of Medusa's candidates, rated by
  the heads folder's ``acceptance.json``, uniform stand-ins without one), the same with the
  packaged n-gram LM's evidence (its table on the device; only when the LM's ARPA file lies
  beside its binary: the table reads it), prompt lookup and vanilla + lookup.

Each row: tokens/s (wall time of the decode calls; every row warmed up first by one whole
decode, so graphs are captured before timing), its speedup over the graph greedy, B, how many
outputs equal the graph greedy's, and the median ms per step of the device step (``forward``:
for a device row its launch and the wait for its output row; for a host row the forward alone)
and of the host's own work (``host``: everything else of a step). ``--tiny``: a tiny random
Llama with 3 heads (numbers mean nothing; checks the script). Prints each precision's table
as it is measured and writes ``device.{json,md}`` in ``--out`` after each.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

DEVICE = "(device step)"


def rows_of(heads: int, folder: Path | None = None,
            log: Any = print) -> dict[str, tuple[Any, bool]]:
    """Row name -> (drafter: a DraftSpec, or "greedy"; on the device). ``folder``: the heads
    folder, whose ``acceptance.json`` and n-gram LM the rated trees read."""
    from blockdraft.drafts import DraftSpec

    trees = {"vanilla heads": DraftSpec("heads"),
             "medusa tree N=16": DraftSpec("tree", tree="medusa", budget=16)}
    if heads >= 4:
        trees["medusa tree N=64"] = DraftSpec("tree", tree="medusa", budget=64)
    out: dict[str, tuple[Any, bool]] = {"greedy (graph)": ("greedy", False),
                                        f"greedy {DEVICE}": ("greedy", True)}
    for name, spec in trees.items():
        out[name] = (spec, False)
        out[f"{name} {DEVICE}"] = (spec, True)
    tables = folder / "acceptance.json" if folder is not None else None
    rated: dict[str, Any] = ({"tables": str(tables)} if tables is not None and tables.is_file()
                             else {})
    for n in (16, 32):
        out[f"rated tree N={n} {DEVICE}"] = (DraftSpec("tree", tree="rated", budget=n, **rated),
                                             True)
    lm = _ngram_of(folder, log)
    if lm is not None:
        out[f"rated tree N=32 + n-gram {DEVICE}"] = (
            DraftSpec("tree", tree="rated", budget=32, rescorer="ngram", lm=str(lm), **rated),
            True)
    out[f"lookup {DEVICE}"] = (DraftSpec("lookup"), True)
    out[f"vanilla + lookup {DEVICE}"] = (DraftSpec("combined"), True)
    return out


def _ngram_of(folder: Path | None, log: Any) -> Path | None:
    """The heads folder's n-gram LM when the device can read it (its ARPA file beside the
    binary), else None (said in the log)."""
    if folder is None:
        return None
    from blockdraft.models.hf.drafting import read_drafting

    recipe = read_drafting(folder)
    lm = None if recipe is None else recipe.ngram
    if lm is None:
        return None
    if not lm.with_suffix(".arpa").is_file() and lm.suffix != ".arpa":
        log(f"rated tree + n-gram: skipped ({lm.with_suffix('.arpa').name} is not beside "
            f"{lm.name}; the device's n-gram table reads the ARPA file)")
        return None
    return lm


def run_row(model: Any, drafter: Any, on_device: bool, prompts: list[list[int]], max_new: int,
            eos: int | None) -> tuple[list[list[int]], float, int, list[float], list[float]]:
    """``(outputs, wall seconds, calls, device ms per step, host ms per step)``."""
    from blockdraft.models import greedy_generate
    from blockdraft.models.runtimes.device_step import decoder
    from blockdraft.models.runtimes.device_tree import StaticTree
    from blockdraft.verify import decode

    outs, secs, calls, dev_ms, host_ms = [], 0.0, 0, [], []
    for p in prompts:
        start = time.perf_counter()
        if drafter == "greedy" and not on_device:
            outs.append(greedy_generate(model, p, max_new, eos_id=eos))
            secs += time.perf_counter() - start
            calls += len(outs[-1])
            continue
        if drafter == "greedy":
            run = decoder(model, StaticTree.greedy()).decode(p, max_new, eos)
            secs += time.perf_counter() - start
            outs.append(run.tokens)
            calls += 1 + len(run.steps)
            dev_ms += [1e3 * (s.launch_s + s.wait_s) for s in run.steps]
            host_ms += [1e3 * s.host_s for s in run.steps]
            continue
        model.device_steps = on_device
        result = decode(model, p, drafter=drafter, max_new_tokens=max_new, eos_id=eos)
        secs += time.perf_counter() - start
        outs.append(result.tokens)
        calls += result.calls
        dev_ms += [1e3 * s.forward_s for s in result.steps]
        host_ms += [1e3 * (s.heads_s + s.lattice_s + s.draft_s + s.other_s)
                    for s in result.steps]
    return outs, secs, calls, dev_ms, host_ms


def measure(model: Any, prompts: list[list[int]], max_new: int, eos: int | None,
            log: Any = print, folder: Path | None = None) -> dict[str, Any]:
    """Every row's figures (module docstring) for one loaded model (``folder``: its heads'
    folder)."""
    rows: dict[str, Any] = {}
    greedy: list[list[int]] = []
    base_tok_s = float("nan")
    for name, (drafter, on_device) in rows_of(model.h - 1, folder, log).items():
        try:
            log(f"{name}: warm-up")  # the longest prompt: every graph the others need, captured
            run_row(model, drafter, on_device, [max(prompts, key=len)], max_new, eos)
            log(f"{name}: {len(prompts)} prompts")
            outs, secs, calls, dev_ms, host_ms = run_row(model, drafter, on_device, prompts,
                                                         max_new, eos)
        except Exception as e:  # a row that fails is reported, the next one runs
            if name == "greedy (graph)":
                raise
            rows[name] = {"error": f"{type(e).__name__}: {e}"}
            log(f"{name} failed: {type(e).__name__}: {e}")
            continue
        tokens = sum(len(o) for o in outs)
        if name == "greedy (graph)":
            greedy, base_tok_s = outs, tokens / secs
        rows[name] = {
            "tokens": tokens, "seconds": secs, "tok_s": tokens / secs,
            "speedup": tokens / secs / base_tok_s, "B": tokens / max(calls, 1),
            "identical": sum(o == g for o, g in zip(outs, greedy, strict=True)),
            "device_ms": statistics.median(dev_ms) if dev_ms else None,
            "host_ms": statistics.median(host_ms) if host_ms else None}
    model.device_steps = False
    return rows


NOTE = ("speedup: tokens/s over greedy (graph) in the same precision; identical: outputs "
        "equal to greedy (graph)'s; device: a device row's step (launch and wait for its output "
        "row), a host row's forward; host: the rest of a step.")


def section(precision: str, part: dict[str, Any]) -> list[str]:
    """One precision's table (Markdown lines)."""
    lines = ["", f"## {precision}", ""]
    if "error" in part:
        return [*lines, f"Failed: `{part['error']}`"]
    lines += ["| row | tokens/s | speedup | B | identical | device ms/step | host ms/step |",
              "|---|---|---|---|---|---|---|"]

    def ms(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}"

    for name, r in part["rows"].items():
        if "error" in r:
            lines.append(f"| {name} | failed: `{r['error']}` | | | | | |")
            continue
        lines.append(f"| {name} | {r['tok_s']:.1f} | {r['speedup']:.2f}x | {r['B']:.2f} | "
                     f"{r['identical']}/{part['prompts']} | {ms(r['device_ms'])} | "
                     f"{ms(r['host_ms'])} |")
    return lines


def markdown(report: dict[str, Any]) -> str:
    from benchmarks.common.report import header

    lines = header("The decode step on the device against the graph greedy", report)
    for precision, part in report["precisions"].items():
        lines += section(precision, part)
    return "\n".join([*lines, "", NOTE])


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks.common.replay import PROMPTS
    from benchmarks.common.report import command_line, log, write_report
    from blockdraft.core.signature import environment, format_signature

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="what load_model takes (a GGUF path)")
    ap.add_argument("--heads", default=None, help="a heads folder for --model")
    ap.add_argument("--tiny", action="store_true", help="a tiny random Llama: a smoke run")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", action="append", choices=("float32", "bfloat16"), default=None)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    precisions = args.dtype or ["float32"]
    name = "tiny-random-llama" if args.tiny else (
        args.model if args.heads is None else f"{args.model}+{Path(args.heads).name}")
    signature = format_signature({
        "model": name, "runtime": "static", "precisions": ",".join(precisions),
        "prompts": args.prompts, "max_new_tokens": args.max_new_tokens,
        **environment(args.device)})
    report: dict[str, Any] = {"command": command_line("benchmarks.bench_device_step", argv),
                              "signature": signature, "precisions": {}}
    print("\n".join(markdown(report).splitlines()[:-2]), flush=True)  # the title, signature
    for precision in precisions:
        try:
            if args.tiny:
                from benchmarks.common.stand_ins import tiny_model
                from blockdraft.models.hf import HFBlockwiseModel
                from blockdraft.models.runtimes import on_runtime

                plain = tiny_model()
                model = on_runtime(HFBlockwiseModel(
                    plain.base, plain.heads, device=args.device,
                    dtype=getattr(torch, precision)), "static", precision)
                prompts = [[5, 9, 2, 33, 7, 8, 9, 10, 11], [3, 1, 4, 1, 5, 9, 2, 6]]
                prompts = (prompts * args.prompts)[: args.prompts]
                eos = None
            else:
                from blockdraft.models import load_model

                model = load_model(args.model, runtime="static", dtype=precision,
                                   device=args.device, heads=args.heads)
                tok = model.tokenizer
                prompts = [tok.apply_chat_template([{"role": "user", "content": q}])
                           for q in PROMPTS[: args.prompts]]
                eos = tok.eos_id
            rows = measure(model, prompts, args.max_new_tokens, eos,
                           log=lambda m, p=precision: log(f"{p} {m}"),
                           folder=None if args.heads is None else Path(args.heads))
            report["precisions"][precision] = {"prompts": len(prompts), "rows": rows}
        except Exception as e:  # a precision that fails is reported, the next one runs
            report["precisions"][precision] = {"error": f"{type(e).__name__}: {e}"}
            log(f"{precision} failed: {type(e).__name__}: {e}")
        print("\n".join(section(precision, report["precisions"][precision])), flush=True)
        write_report(report, args.out, "device", markdown)  # what a time limit leaves
    print(f"\n{NOTE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
