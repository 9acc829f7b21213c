"""``blockdraft demo``: by default :func:`blockdraft.demo.run_real_demo` on SmolLM2 (or
``--model PATH``) and its table (B, tokens/s, speedup over greedy, equality with greedy per
strategy), one answer and one step's lattice; with ``--blockwise``,
:func:`blockdraft.demo.run_demo` on a small self-trained blockwise model and its two tables
(the models on held-out text, then block efficiency per drafting strategy)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from blockdraft.cli.common import (
    JSON_HELP,
    CliError,
    add_command,
    add_overwrite,
    print_json,
    print_table,
    progress_bar,
    utf8_argument,
)
from blockdraft.cli.values import ListAction, Rule, add_rules, non_negative_int, positive_int
from blockdraft.core.outputs import claim_output
from blockdraft.demo.config import REAL_ALSO_PRECISION, REAL_MAX_NEW_TOKENS

DEMO_FILES = ("demo.json", "demo_lattice.png", "trace")
"""What the demo writes in --out (the trace: --blockwise only)."""
_BLOCKWISE_ONLY = ("examples", "seed", "stop_at_eos")
_REAL_ONLY = ("model", "heads", "dtype", "runtime", "precision", "also_precision", "prompt",
              "max_new_tokens")
_EXAMPLES = {"stop_at_eos": (), "dtype": ("float32",), "runtime": ("torch",),
             "precision": ("int8",), "also_precision": ("none",), "model": ("m",),
             "heads": ("h",), "prompt": ("hi",)}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


DEMO_RULES = (
    *(Rule(_flag(name), "does not apply without --blockwise (the small self-trained "
                        f"model's); add --blockwise, or drop {_flag(name)}", lambda a: a.blockwise,
           (_flag(name), *_EXAMPLES.get(name, ("4",)))) for name in _BLOCKWISE_ONLY),
    *(Rule(_flag(name), "does not apply with --blockwise (it is the real model's); drop "
                        f"{_flag(name)}, or --blockwise", lambda a: not a.blockwise,
           ("--blockwise", _flag(name), *_EXAMPLES.get(name, ("4",)))) for name in _REAL_ONLY),
    Rule("--precision", lambda a: f"is for --runtime onnxruntime; {a.runtime}'s precision is "
                                  "--dtype", lambda a: a.runtime in (None, "onnxruntime"),
         ("--runtime", "torch", "--precision", "int8")),
)
"""The options of ``demo`` that apply only with or without ``--blockwise``."""


def _log(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def cmd_demo(args: argparse.Namespace) -> int:
    prompts = ([utf8_argument(q, "--prompt") for q in args.prompt] if args.prompt
               else None)
    output = claim_output(args.out, what="the demo's output", error=CliError,
                          overwrite=args.overwrite, flag="--out", own=DEMO_FILES)
    # --overwrite: the demo writes beside --out, and its files replace the old ones together
    with output.writing() as writing:
        res = (_blockwise if args.blockwise else _real)(args, writing.path, prompts)
        if writing.path != output.path:  # what it reports and records names --out
            from blockdraft.demo.prepare import write_json

            res = dataclasses.replace(res, **{
                f.name: writing.final(getattr(res, f.name)) for f in dataclasses.fields(res)
                if isinstance(getattr(res, f.name), Path)})
            write_json(writing.path / "demo.json", res.to_dict())
    if args.json:
        print_json(res.to_dict())
    elif args.blockwise:
        print_blockwise(res)
    else:
        print_real(res)
    return 0


def _real(args: argparse.Namespace, out: Path, prompts: list[str] | None) -> Any:
    """``demo``: a real model (SmolLM2 by default)."""
    from blockdraft.demo import REAL_MODEL, REAL_PROMPTS, REAL_RUNTIME, run_real_demo

    return run_real_demo(args.model or REAL_MODEL, out, heads=args.heads,
                         dtype=args.dtype or "float32", runtime=args.runtime or REAL_RUNTIME,
                         precision=(args.dtype or "float32") if args.runtime == "static"
                         else args.precision or "float32",
                         also_precision=(REAL_ALSO_PRECISION if args.also_precision is None
                                         else None if args.also_precision == "none"
                                         else args.also_precision), corpus=args.corpus,
                         prompts=prompts or list(REAL_PROMPTS),
                         max_new_tokens=args.max_new_tokens or REAL_MAX_NEW_TOKENS,
                         threads=args.threads, progress=progress_bar, log=_log)


def _blockwise(args: argparse.Namespace, out: Path, prompts: list[str] | None) -> Any:
    """``demo --blockwise``: the small self-trained BlockwiseLM."""
    from blockdraft.demo import run_demo

    return run_demo(args.corpus, out, num_examples=args.examples or 8, seed=args.seed or 0,
                    stop_at_eos=args.stop_at_eos, threads=args.threads,
                    progress=sys.stderr.isatty(), log=_log)


def print_real(res: Any) -> None:
    """The real-model demo's table, its sample answer and its lattice."""
    greedy = res.rows[0]
    two = any(r.speedup_torch is not None for r in res.rows)
    rows = [(r.strategy, f"{r.block_efficiency:.2f}", f"{r.tokens_per_s:.1f}",
             f"{r.speedup:.2f}x", *([f"{r.speedup_torch:.2f}x"] if two else []),
             "yes" if r.equals_greedy else f"no ({r.identical}/{r.prompts})",
             f"{r.wall_s:.1f}", f"{r.draft_s:.1f}") for r in res.rows]
    differ = [r.strategy for r in res.rows if not r.equals_greedy]
    note = ""
    if differ:
        note = ("\n" + ", ".join(differ) + ": output differs from greedy decoding; " + (
            "in a reduced precision a forward over several tokens can round differently and "
            "flip a near-tie (docs/real-models.md)" if res.dtype in ("bfloat16", "float16")
            else "with the exact criterion in float32 that is a bug: please report it"))
    settings = "".join(f"\n  {r.strategy}: {r.settings}" for r in res.rows)
    lm = (f"{len(res.ngram_counts)}-gram LM ({sum(res.ngram_counts):,} n-grams) over the "
          f"model's token ids of {res.corpus}, "
          f"{'trained in this run' if res.ngram_trained else 'from the cache'}: {res.ngram_path}")
    where = {"torch": "PyTorch", "static": f"the static runtime (transformers on a static "
             f"cache, CUDA graphs on a GPU), {res.dtype}"}.get(res.runtime,
                                                              f"ONNX Runtime, {res.dtype}")
    _table(
        f"{res.model} on {where} (heads: {res.heads}, h = {res.h}): {len(res.prompts)} "
        f"{'chat ' if res.chat else ''}prompts, {greedy.tokens} tokens, exact criterion",
        ["strategy", "B", "tokens/s", "vs greedy", *(["vs PyTorch greedy"] if two else []),
         "= greedy", "wall s", "drafting s"], rows,
        caption="B: tokens per serial model call (greedy = 1); tokens/s and speedups measured "
        f"in this run ({res.threads} thread(s)): vs greedy = over the greedy loop of the same "
        "runtime and precision" + (", vs PyTorch greedy = over the PyTorch float32 greedy loop"
                                   if two else "") + "; = greedy: every output identical to "
        "greedy decoding's (rows of another precision: that precision's), token for token; "
        f"drafting s: the part of wall s building lattices and drafts (rescoring included)"
        f"{note}\n{lm}\n"
        f"signature: {res.signature}|<row settings>{settings}",
    )
    split_rows = []
    for r in res.rows:
        sp = r.split or {}
        steps = max(sp.get("steps", 0.0), 1.0)
        per = [1e3 * sp.get(k, 0.0) / steps for k in ("forward_s", "heads_s", "lattice_s",
                                                      "search_s", "other_s")]
        split_rows.append((r.strategy, f"{1e3 * sp.get('prefill_s', 0.0) / r.prompts:.0f}",
                           f"{int(sp.get('steps', 0))}", f"{sum(per):.1f}",
                           *(f"{x:.2f}" for x in per),
                           f"{1e3 * sp.get('outside_s', 0.0) / r.prompts:.1f}"))
    _table("where each call's time goes", ["strategy", "prefill ms/call", "steps", "ms/step",
                                           "forward", "heads", "lattice", "search", "other",
                                           "outside ms/call"], split_rows,
           caption="a call = its prefill (the prompt's forward), its verification steps, and "
           "what lies outside both; per step (ms): the forward with the base head at every "
           "node, the next step's Medusa heads (ResBlocks, projection and top-k), the lattice, "
           "the search (the drafter), the rest (criterion, cache)")
    console = _console()
    console.print(f"\n[bold]prompt 1:[/bold] {_esc(res.sample_prompt)}\n"
                  f"[bold]greedy answer:[/bold] {_esc(res.sample_answer)}\n")
    print_lattice(res.lattice)
    console.print(
        f"lattice drawing: {_esc(str(res.lattice_png))}\n"
        f"{res.seconds:.1f} s in all: loading the model {res.load_s:.1f} s, the n-gram LM "
        f"{res.ngram_s:.1f} s, warm-up {res.warmup_s:.1f} s, timed decoding "
        f"{res.decode_s:.1f} s")


def print_lattice(view: Any) -> None:
    """One step's lattice as a table: a column per slot, arcs best first, the greedy path's
    arc in bold red."""
    from rich.table import Table
    from rich.text import Text

    missing = "".join(f"\n  slot {i + 1}: the greedy token '{view.greedy[i]}' is not among "
                      "these arcs" for i, r in enumerate(view.greedy_rank)
                      if r is None and i < len(view.greedy))
    table = Table(title=view.title, caption_justify="left",
                  caption=Text("greedy path: " + " ".join(f"'{t}'" for t in view.greedy)
                               + missing))
    table.add_column("rank", justify="right")
    for i in range(len(view.slots)):
        table.add_column(f"slot {i + 1}", justify="left")
    for rank in range(max(len(s) for s in view.slots)):
        cells: list[Any] = [str(rank + 1)]
        for i, slot in enumerate(view.slots):
            if rank >= len(slot):
                cells.append("")
                continue
            text, score = slot[rank]
            cells.append(Text(f"'{text}' {score:.2f}",
                              style="bold red" if view.greedy_rank[i] == rank else ""))
        table.add_row(*cells)
    _console().print(table)


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]],
           caption: str) -> None:
    """A rich table on stdout (text cells taken literally, not as markup)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, caption=Text(caption), caption_justify="left")
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for r in rows:
        table.add_row(*[Text(str(v)) for v in r])
    _console().print(table)


def _console() -> Any:
    """A console on stdout; a file or pipe gets 132 columns instead of rich's default 80, so
    the demo's tables are not folded there."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = max(console.width, 132)
    return console


def _esc(text: str) -> str:
    from rich.markup import escape

    return str(escape(text))


def print_blockwise(res: Any) -> None:
    """The blockwise demo's two tables: the models on held-out text, B per strategy."""
    h = len(res.heldout_loss)
    model_rows: list[tuple[object, ...]] = [
        (f"head {i + 1}", res.heldout_loss[i], f"{100 * res.heldout_accuracy[i]:.1f}%")
        for i in range(h)
    ]
    model_rows += [("rescoring LM", res.rescorer_loss, None),
                   ("4-gram LM", res.ngram_loss, None),
                   ("unigram (for scale)", res.unigram_loss, None)]
    source = "trained in this run" if res.trained else "loaded from the cache"
    print_table(
        f"the models ({source}), on held-out text",
        ["", "loss (nats/token)", "top-1"], model_rows,
        caption=f"consecutive repeats in vanilla drafts: {res.vanilla_repetition:.1f}% "
        "(high values mean greedy loops, which inflate B)\n"
        f"sample, held-out prompt 1: {res.sample_prompt!r}\n"
        f"  greedy continuation: {res.sample_output!r}",
    )
    agree = all(r.agrees for r in res.rows)
    rows = [(r.strategy, r.block_efficiency, f"{100 * r.relative:+.1f}%",
             f"{r.offline_block_efficiency:.3f}{'' if r.agrees else ' *'}",
             r.wall_s, None if r.speedup is None else f"{r.speedup:.2f}x")
            for r in res.rows]
    settings = "".join(f"\n  {r.strategy}: {r.settings}" for r in res.rows)
    print_table(
        f"block efficiency B, exact criterion (each output checked equal to greedy "
        f"decoding), {res.num_examples} held-out prompts, {res.generated_tokens} tokens, "
        f"h = {h}",
        ["drafts", "B", "vs vanilla", "offline B", "wall s", "vs greedy"], rows,
        caption=("" if agree else "* online decode and offline simulation differ "
                 "(a numerical tie or a bug)\n")
        + f"offline B: simulated over the trace {res.trace_dir} (the oracle's only B); "
        f"greedy decoding took {res.greedy_s:.2f} s\n"
        f"lattice drawing: {res.lattice_png}\ncache: {res.cache_dir}\n"
        f"signature: {res.signature}|<row settings>{settings}\n"
        f"{res.seconds:.1f} s ({res.train_s:.1f} s training), {res.threads} torch thread(s)",
    )


def add_parser(sub: Any) -> None:
    """``demo``."""
    p = add_command(sub, "demo",
                    "decode a few chat prompts with SmolLM2 and its Medusa heads (or --model) "
                    "with greedy decoding, vanilla heads and n-gram rescored drafts; print B, "
                    "tokens/s, speedup and equality with greedy, one answer and one lattice "
                    "(--blockwise: a small self-trained blockwise model instead)", cmd_demo)
    p.add_argument("--model", default=None,
                   help="a model name or path load_model takes (default smollm2: "
                        "SmolLM2-135M-Instruct with its packaged Medusa heads), e.g. a Hugging "
                        "Face folder or .gguf file with --heads")
    p.add_argument("--heads", default=None,
                   help="Medusa heads for --model (a folder in any layout; default: the "
                        "model's packaged heads)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="the PyTorch model's dtype (default float32: exact, and what another "
                        "runtime is exported from)")
    p.add_argument("--runtime", choices=("onnxruntime", "torch", "static"), default=None,
                   help="where the strategies run (default onnxruntime: the fastest lossless "
                        "runtime on a CPU; static: transformers on a preallocated cache, "
                        "replayed as CUDA graphs on a GPU; with a runtime other than torch "
                        "the PyTorch greedy loop runs as a second reference)")
    p.add_argument("--precision", choices=("float32", "int8", "q4"), default=None,
                   help="--runtime onnxruntime: float32 (default, PyTorch's answers), int8 "
                        "(chunk-invariant per-row int8: lossless against its own greedy) or q4 "
                        "(the GGUF file's own 4-bit blocks: lossless against q4's greedy; the "
                        "strategies of token trees, which there take a confirming second "
                        "forward a step, are skipped)")
    p.add_argument("--also-precision", choices=("q4", "int8", "none"), default=None,
                   help="rows beside in this other ONNX Runtime precision: its greedy loop, "
                        "blockdraft's default and prompt lookup, each held against that "
                        f"precision's own greedy (default {REAL_ALSO_PRECISION}: the GGUF "
                        "file's own 4-bit blocks, for a model loaded from one; none: no rows)")
    p.add_argument("--prompt", action=ListAction, nargs=None, default=None, metavar="TEXT",
                   help="a user turn to decode instead of the demo's Python questions "
                        "(repeat for several)")
    p.add_argument("--max-new-tokens", type=positive_int, default=None,
                   help=f"tokens per prompt (default {REAL_MAX_NEW_TOKENS}; EOS stops "
                        "earlier)")
    p.add_argument("--corpus", type=Path, default=None,
                   help="a text file for the n-gram LM (with --blockwise: for every model "
                        "trained; default: pydoc_data.topics, shipped with Python)")
    p.add_argument("--out", type=Path, default=Path("demo-output"),
                   help="where the lattice drawing, demo.json (and with --blockwise the "
                        "trace) go (default ./demo-output)")
    add_overwrite(p, "the demo's files in --out (an earlier run's)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads (default: the cores not already busy)")
    p.add_argument("--blockwise", action="store_true",
                   help="the model-free quick look: train (once, cached) a small blockwise LM, "
                        "a rescoring LM and a 4-gram on the corpus, decode held-out prompts "
                        "with every drafting strategy, print B and the oracle")
    p.add_argument("--examples", type=positive_int, default=None,
                   help="--blockwise: held-out prompts (default 8)")
    p.add_argument("--seed", type=non_negative_int, default=None,
                   help="--blockwise: the split and the training (part of the cache key; "
                        "default 0)")
    p.add_argument("--stop-at-eos", action="store_true",
                   help="--blockwise: stop each decode at EOS (default: EOS is a paragraph "
                        "separator and every prompt gets 48 new tokens)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    add_rules(p, *DEMO_RULES)
