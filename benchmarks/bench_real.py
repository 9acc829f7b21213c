"""Faster than greedy on the real model? End to end on SmolLM2, peers side by side (issue 11).

    .venv/bin/python -m benchmarks.bench_real            # quick: 3 prompts per task
    .venv/bin/python -m benchmarks.bench_real --full     # make bench-real: 8 prompts per task
    .venv/bin/python -m benchmarks.bench_real --smoke    # 1 prompt per task x 16 tokens

SmolLM2-135M-Instruct with its Medusa heads (``load_model("smollm2")``, or ``--heads DIR``) in
``--dtype`` (float32 default: on a CPU without bfloat16 units it is the faster one) on
``--threads`` torch threads, batch 1, temperature 0, ``--max-new-tokens`` (128) with EOS
honoured. Prompts: one user turn in the model's chat template from the evaluation files of the
shared data (``benchmarks/common/tasks.py``, ``REAL_TASKS``: SQuAD QA, CNN/DM and SAMSum
summarization, WMT14 newstest2014 de->en, a free writing/explanation set written for this
benchmark, LAMBADA continuation), the document cut at a word so that the prompt stays within
``--prompt-tokens`` (400); never the distillation prompts.

Strategies, every one with the exact criterion (lossless): the reference greedy loop
(:func:`blockdraft.models.greedy_generate`, one token per forward, head 1 only), vanilla heads
(k = 1, p = 1), p-best 0-gram (k, p), n-gram rescored (p = 1 and p; a 4-gram over SmolLM2's
token ids that this script trains once with ``blockdraft ngram train`` on a subset of the
pretraining corpus and caches under ``$BLOCKDRAFT_CACHE/bench/real``), neural rescored (only
with a RescorerLM over SmolLM2's tokenizer: ``--neural``), input copy (IAD) alone and beside
the vanilla heads (every step verifies its drafts as one trie; ``--p-verify trie`` only names
the p > 1 rows "(trie)"). Peers on the same model, dtype,
threads and prompts (``common/peers.py``): transformers' ``generate`` greedy and its prompt lookup
decoding (``prompt_lookup_num_tokens=10``) on the base model, and llama.cpp (llama-cpp-python)
greedy and prompt lookup on the same GGUF file when ``llama_cpp`` imports (``make
bench-real-peers-setup``). For each prompt the greedy reference runs first, then every strategy
and peer, so that machine noise is spread over all of them; each is warmed up once on the first
prompt before anything is timed.

Definitions (also written into the report):
- B, block efficiency (docs/definitions.md sec. 2): generated tokens / serial model calls, the
  prompt's prefill counted as a call and yielding the first token, so greedy has B = 1.00 and
  every verification call counts its accepted tokens plus the bonus token. Per task the pooled
  ratio (sum of tokens / sum of calls), overall the mean over tasks. ``B/verify``: tokens per
  verification call with the prefill and its token left out, Spec-Bench's per-step mean
  ((tokens - 1) / (calls - 1), pooled).
- tokens/s: generated tokens / wall time of the whole call (prefill included), timed around
  the call (``greedy_generate``, ``decode``, a peer's ``generate``). Per task the median over
  prompts, overall the mean over tasks.
- speedup: tokens/s of a strategy / tokens/s of the reference greedy loop on the same prompt;
  per task the median over prompts, overall the mean of the task medians.
- identical: the output equals the reference greedy output token for token (peers: also
  against their own greedy peer).
- time split of a verification step (the prefill excluded), pooled over steps: the forward,
  the lattice (top-k over V of every head), the draft search / rescoring (the drafter's
  ``draft``: p-best search, n-gram or neural rescoring, input copy), and the rest of the
  step (acceptance, cache selection, book-keeping); as shares of the step time and as the
  non-forward time relative to the forward.

Writes ``benchmarks/results/real/real.{md,json,png}`` (``--full``; quick: ``real/quick/``,
smoke: ``real/smoke/``), each with the command and a signature (model, heads, dtype, threads,
h, k, p, alpha, LM, commit).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common.data import SHARED, _key
from benchmarks.common.real_model import (
    MODEL,
    PromptCase,
    build_cases,
    heads_folder,
    heads_label,
)
from benchmarks.common.real_report import (
    make_report,
    markdown,
    own_runtime,
    write_report,
)
from benchmarks.common.report import log
from blockdraft.core.efficiency import block_efficiency

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results" / "real"

PRESETS = {  # prompts per task, max new tokens, results folder, LM corpus
    "quick": (3, 128, RESULTS / "quick", "default"),
    "full": (8, 128, RESULTS, "default"),
    "smoke": (1, 16, RESULTS / "smoke", "small"),
}
LM_CORPORA = {
    # The pretraining corpus only (docs: ../shared/data/README.md), never evaluation text.
    "default": ("corpus/openstax/*.txt", "corpus/more/openstax/introduction-anthropology.txt",
                "corpus/more/openstax/principles-economics-3e.txt"),
    "small": ("corpus/openstax/introduction-philosophy-2e.txt",),
}
STRATEGY_KEYS = ("default", "vanilla", "vanilla-depth", "pbest0", "ngram", "pbest-ngram",
                 "rescored-tree", "neural", "iad", "vanilla-iad", "lookup", "vanilla-lookup",
                 "default-hod1", "default-hod2", "default-hod3", "default-hod4")
"""``default-hodN``: the default with heads on demand, the heads skipped on a step whose best
copy matched N tokens (``DraftSpec.heads_on_demand``)."""
RUNTIME_TAGS = {"torch:float32": "pt32", "torch:bfloat16": "pt-bf16",
                "onnxruntime:float32": "ort32", "onnxruntime:int8": "ort8",
                "onnxruntime:q4": "ort4"}
"""``runtime:precision`` -> the short tag strategy names carry (``vanilla [ort32]``)."""
PEER_KEYS = ("hf", "hf-pld", "llama", "llama-pld")
LOOKUP = 10  # prompt_lookup_num_tokens: transformers' and llama-cpp-python's default
NEURAL_TRAIN = ["--preset", "small", "--steps", "600", "--seed", "0", "--n-layer", "1",
                "--n-head", "2", "--d-model", "128", "--d-ff", "512"]


# ---- what is run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Strategy:
    """A blockdraft strategy: ``make(prompt_ids)`` names its drafter for one prompt (a
    :class:`~blockdraft.drafts.DraftSpec`, which ``decode`` builds on the model; a
    :class:`FromModel`; or a drafter); ``make=None`` is the reference greedy loop."""

    name: str
    make: Callable[[list[int]], Any] | None
    k: int = 1
    p: int = 1
    alpha: float | None = None
    lm: str = "-"
    tree: bool = False  # the "(trie)" rows of --p-verify trie: every step verifies a trie now
    runtime: str = "pt32"  # which loaded model runs it (RUNTIME_TAGS)


class FromModel:
    """A spec made from the model a strategy runs on (``build(model) -> DraftSpec``)."""

    def __init__(self, build: Callable[[Any], Any]) -> None:
        self.build = build


def _constant(made: Any) -> Callable[[list[int]], Any]:
    """``make`` of a strategy whose drafter does not depend on the prompt."""
    return lambda _: made


def _on_demand(match: int) -> Callable[[Any], Any]:
    """The model's default spec with heads on demand at ``match`` tokens."""

    def build(model: Any) -> Any:
        import dataclasses

        from blockdraft.drafts import default_spec
        from blockdraft.models.capabilities import capabilities_of

        return dataclasses.replace(default_spec(capabilities_of(model)),
                                   heads_on_demand=match)

    return build


def _vanilla_depth(model: Any) -> Any:
    """The heads' top-1 chain cut where it stops paying: the cost-aware tree of the chain
    alone (no rescored path, no copy) on the default drafter's acceptance tables; ``decode``
    sizes it on the model's cost curve."""
    from blockdraft.drafts import DraftSpec, default_spec
    from blockdraft.models.capabilities import capabilities_of

    tables = default_spec(capabilities_of(model)).tables
    return DraftSpec("cost-aware", k=1, p=0, budget=32, lookup=False, tables=tables)


def build_strategies(*, k: int, p: int, alpha: float, lm: Any = None, lm_label: str = "",
                     neural: Any = None, neural_label: str = "", iad_min_match: int = 2,
                     only: Sequence[str] = STRATEGY_KEYS, trie: bool = False,
                     skipped: dict[str, str] | None = None, runtime: str = "pt32",
                     tagged: bool = False, tree_budget: int = 8, tree_k: int = 10,
                     tree_alpha: float = 0.25, context_weight: float = 0.0) -> list[Strategy]:
    """The reference greedy loop and the strategies named in ``only`` (``STRATEGY_KEYS``);
    the n-gram ones need ``lm`` (an ``NgramLM``: its file names the spec's LM), the neural one
    ``neural`` (a ``NeuralRescorer``): without them they are left out and ``skipped`` says why.
    ``trie``: the ``p > 1`` strategies are named "(trie)" (every step verifies a trie: the same
    output and B as the batch of ``p`` rows)."""
    from blockdraft.drafts import CombinedDrafter, DraftSpec, InputCopyDrafter
    from blockdraft.rescorers.ngram.context import DEFAULT_ORDER

    skipped = {} if skipped is None else skipped
    out = [Strategy("greedy", None)]
    order = getattr(lm, "order", 4)
    suffix = " (trie)" if trie else ""
    ngram = {} if lm is None else {"rescorer": "ngram", "lm": str(lm.path)}
    context = ({"context_order": DEFAULT_ORDER, "context_weight": context_weight}
               if context_weight else {})

    def spec(*args: Any, **kw: Any) -> Callable[[list[int]], Any]:
        made = DraftSpec(*args, **kw)
        return lambda _: made

    for key in only:
        if key == "default":
            out.append(Strategy("blockdraft default (cost-aware tree)", spec("default"),
                                lm="packaged"))
        elif key.startswith("default-hod"):
            match = int(key.removeprefix("default-hod"))
            out.append(Strategy(f"default, heads unless a {match}-token copy",
                                _constant(FromModel(_on_demand(match))), lm="packaged"))
        elif key == "vanilla-depth":
            out.append(Strategy("vanilla, cost-aware depth", lambda _: FromModel(_vanilla_depth)))
        elif key == "vanilla":
            out.append(Strategy("vanilla", spec("heads")))
        elif key == "pbest0":
            out.append(Strategy(f"{p}-best 0-gram{suffix}", spec("heads", k=k, p=p),
                                k, p, tree=trie and p > 1))
        elif key in ("ngram", "pbest-ngram"):
            pp = 1 if key == "ngram" else p
            name = f"{order}-gram" if pp == 1 else f"{pp}-best {order}-gram{suffix}"
            if context_weight:
                name = name.replace("-gram", f"-gram + context(w={context_weight:g})", 1)
            if lm is None:
                skipped[name] = "no n-gram LM (--lm none)"
                continue
            out.append(Strategy(name, spec("heads", k=k, p=pp, alpha=alpha, **ngram, **context),
                                k, pp, alpha, lm_label, tree=trie and pp > 1))
        elif key == "neural":
            if neural is None:
                skipped.setdefault("neural", "no RescorerLM over the model's tokenizer")
                continue
            # a RescorerLM on ONNX Runtime, which no spec names by file: given as an object
            out.append(Strategy("neural", spec("heads", k=k, rescorer="given", given=neural,
                                               alpha=alpha), k, 1, alpha, neural_label))
        elif key == "iad":
            # IAD alone (the copy, else vanilla) names no DraftSpec strategy, and the match
            # length (--iad-min-match) is no spec field: built from the drafts module's parts
            out.append(Strategy("iad", lambda ids: InputCopyDrafter(
                ids, min_match=iad_min_match, name="iad")))
        elif key == "vanilla-iad":
            # DraftSpec("iad") at a match length of 2; --iad-min-match is no spec field: the
            # spec's vanilla heads with the input copy of that length beside them
            out.append(Strategy("vanilla + iad", lambda ids: CombinedDrafter(
                DraftSpec("heads").build(), InputCopyDrafter(ids, min_match=iad_min_match),
                name="vanilla + iad")))
        elif key == "lookup":
            out.append(Strategy("lookup", spec("lookup")))
        elif key == "vanilla-lookup":
            out.append(Strategy("vanilla + lookup", spec("combined")))
        elif key == "rescored-tree":
            name = f"rescored tree {order}-gram (N={tree_budget})"
            if lm is None:
                skipped[name] = "no n-gram LM (--lm none)"
                continue
            out.append(Strategy(name, spec("tree", tree="rescored", k=tree_k, budget=tree_budget,
                                           alpha=tree_alpha, **ngram),
                                tree_k, 1, tree_alpha, lm_label))
        else:
            raise ValueError(f"unknown strategy {key!r}; choose from {', '.join(STRATEGY_KEYS)}")
    # every strategy runs on its runtime's model; with several runtimes its name says which
    return [Strategy(f"{st.name} [{runtime}]" if tagged else st.name, st.make, st.k, st.p,
                     st.alpha, st.lm, st.tree, runtime) for st in out]


# ---- running -------------------------------------------------------------------------------------


def _first_diff(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (None when equal)."""
    if list(a) == list(b):
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def _run_strategy(model: Any, strategy: Strategy, ids: list[int], max_new: int,
                  eos_id: int | None, reference: bool = True) -> tuple[list[int], dict[str, Any]]:
    """``(tokens, row fields)`` of one prompt with one blockdraft strategy."""
    from blockdraft.models import greedy_generate
    from blockdraft.verify import decode
    from blockdraft.verify.records import TimeSplit

    if strategy.make is None:
        clock: list[float] = []
        start = time.perf_counter()
        tokens = greedy_generate(model, ids, max_new, eos_id=eos_id, clock=clock)
        wall = time.perf_counter() - start
        return tokens, {"kind": "reference" if reference else "greedy", "calls": len(tokens),
                        **_split_fields(TimeSplit.greedy(wall, clock, len(tokens))),
                        "wall_s": wall,
                        "stopped": "eos" if tokens and tokens[-1] == eos_id else "max"}
    made = strategy.make(ids)
    if isinstance(made, FromModel):
        made = made.build(model)
    start = time.perf_counter()  # a spec is built inside the call, on the model
    res = decode(model, ids, drafter=made, criterion="exact", max_new_tokens=max_new,
                 eos_id=eos_id)
    wall = time.perf_counter() - start
    steps = res.steps
    return list(res.tokens), {
        "kind": "blockdraft", "calls": res.calls, **_split_fields(res.split), "wall_s": wall,
        "nodes": sum(s.tree.num_nodes for s in steps),
        # steps whose accepted node a copy proposed first (the input copy, prompt lookup)
        "iad_steps": sum(s.source in ("iad", "lookup") for s in steps),
        "stopped": "eos" if res.stopped == "eos" else "max",
    }


def _split_fields(split: Any) -> dict[str, Any]:
    """A call's ``TimeSplit`` as a row's fields (``decode_wall_s``: the call's own clock)."""
    return {"decode_wall_s": split.wall_s, "prefill_s": split.prefill_s, "steps": split.steps,
            "forward_s": split.forward_s, "heads_s": split.heads_s,
            "lattice_s": split.lattice_s, "search_s": split.draft_s, "other_s": split.other_s}


def _run_peer(peer: Any, ids: list[int], max_new: int, eos_id: int | None
              ) -> tuple[list[int], dict[str, Any]]:
    start = time.perf_counter()
    out = peer.generate(ids, max_new, eos_id)
    wall = time.perf_counter() - start
    tokens = list(out.tokens)
    return tokens, {"kind": "peer", "calls": out.calls, "wall_s": wall,
                    "precision": peer.precision,
                    "stopped": "eos" if tokens and tokens[-1] == eos_id else "max"}


def run_benchmark(model: Any, cases: Sequence[PromptCase], strategies: Sequence[Strategy],
                  peers: Sequence[Any] = (), *, max_new_tokens: int, eos_id: int | None,
                  warmup_tokens: int = 8, progress: bool = True) -> dict[str, Any]:
    """``model``: the model every strategy runs on, or ``{runtime tag: model}`` (each
    strategy runs on ``models[strategy.runtime]``; a runtime's greedy loop is the first of its
    strategies without a drafter, and its other strategies also report ``speedup_own`` and
    ``identical_own`` against it)."""
    models = model if isinstance(model, dict) else None
    return _run(models or {s.runtime: model for s in strategies}, cases, strategies, peers,
                max_new_tokens=max_new_tokens, eos_id=eos_id, warmup_tokens=warmup_tokens,
                progress=progress)


def _run(models: dict[str, Any], cases: Sequence[PromptCase], strategies: Sequence[Strategy],
         peers: Sequence[Any] = (), *, max_new_tokens: int, eos_id: int | None,
         warmup_tokens: int = 8, progress: bool = True) -> dict[str, Any]:
    """Every strategy and peer on every prompt: ``{"rows": [...], "outputs": {...}}``.

    ``strategies[0]`` must be the reference (``make=None``). A run that raises is recorded in
    ``errors`` (task, case, strategy, the exception) and the benchmark goes on (a prompt whose
    reference fails is left out). Rows carry per prompt: tokens,
    calls, wall seconds, tokens/s, speedup over the reference on that prompt, whether the
    output is the reference's (and, for peers, their own greedy peer's), and for blockdraft
    strategies the step time split. ``outputs[case index]`` is the reference's token list.
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    if not strategies or strategies[0].make is not None:
        raise ValueError("strategies[0] must be the reference greedy loop (make=None)")
    Runner = Callable[[list[int], int], tuple[list[int], dict[str, Any]]]

    def strategy_runner(s: Strategy, ref: bool) -> Runner:
        return lambda ids, n: _run_strategy(models[s.runtime], s, ids, n, eos_id, ref)

    def peer_runner(peer: Any) -> Runner:
        return lambda ids, n: _run_peer(peer, ids, n, eos_id)

    runners: list[tuple[str, Runner]] = (
        [(s.name, strategy_runner(s, i == 0)) for i, s in enumerate(strategies)]
        + [(peer.name, peer_runner(peer)) for peer in peers])
    family = {peer.name: peer.family for peer in peers if peer.family != peer.name}
    greedy_of: dict[str, str] = {}
    for s in strategies:  # each runtime's own greedy loop
        if s.make is None:
            greedy_of.setdefault(s.runtime, s.name)
    for s in strategies[1:]:
        greedy = greedy_of.get(s.runtime, greedy_of.get(own_runtime(s.runtime)))
        if greedy is not None and greedy != s.name and greedy != strategies[0].name:
            family[s.name] = greedy
    ref_name = strategies[0].name
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    outputs: dict[int, list[int]] = {}
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, disable=not progress) as bar:
        if cases and warmup_tokens > 0:
            job = bar.add_task("warm-up", total=len(runners))
            for name, run in runners:
                bar.update(job, description=f"warm-up: {name}")
                run(list(cases[0].ids), min(warmup_tokens, max_new_tokens))
                bar.advance(job)
            bar.remove_task(job)
        job = bar.add_task("prompts", total=len(cases) * len(runners))
        for i, case in enumerate(cases):
            ids = list(case.ids)
            own: dict[str, list[int]] = {}
            own_tok_s: dict[str, float] = {}
            ref_tok_s = None
            for name, run in runners:
                bar.update(job, description=f"{case.task} #{i}: {name}")
                if name != ref_name and i not in outputs:
                    bar.advance(job)  # no reference output: nothing to compare with
                    continue
                try:
                    tokens, row = run(ids, max_new_tokens)
                except Exception as e:  # noqa: BLE001 - one failure must not lose the run
                    errors.append({"task": case.task, "case": i, "strategy": name,
                                   "error": f"{type(e).__name__}: {e}"})
                    bar.console.print(f"{case.task} #{i}: {name} FAILED: {errors[-1]['error']}",
                                      highlight=False, markup=False)
                    bar.advance(job)
                    continue
                own[name] = tokens
                if name == ref_name:
                    outputs[i] = tokens
                n = len(tokens)
                calls = row.get("calls")
                tok_s = n / row["wall_s"] if row["wall_s"] > 0 else math.nan
                if ref_tok_s is None:
                    ref_tok_s = tok_s
                row.update(
                    task=case.task, case=i, strategy=name, tokens=n, tok_s=tok_s,
                    speedup=tok_s / ref_tok_s if ref_tok_s else math.nan,
                    B=block_efficiency(n, calls) if calls else None,
                    B_verify=(n - 1) / (calls - 1) if calls and calls > 1 else None,
                    identical=tokens == outputs[i], first_diff=_first_diff(outputs[i], tokens),
                )
                own_tok_s[name] = tok_s
                if name in family:
                    mine = own.get(family[name])
                    row["identical_own"] = None if mine is None else tokens == mine
                    base = own_tok_s.get(family[name])
                    row["speedup_own"] = tok_s / base if base else None
                rows.append(row)
                bar.advance(job)
            if i in outputs:
                bar.console.print(
                    f"{case.task} #{i}: {len(outputs[i])} tokens, {ref_name} "
                    f"{ref_tok_s:.1f} tok/s; "
                    + ", ".join(f"{r['strategy']} {r['speedup']:.2f}x"
                                + ("" if r["identical"] else " (differs)")
                                for r in rows if r["case"] == i and r["strategy"] != ref_name),
                    highlight=False, markup=False)
    return {"rows": rows, "outputs": outputs, "errors": errors}


# ---- the real model's inputs ---------------------------------------------------------------------


def corpus_files(name: str, root: Path = SHARED) -> list[Path]:
    """The files of an LM corpus (``LM_CORPORA``), in a fixed order."""
    files: list[Path] = []
    for pattern in LM_CORPORA[name]:
        found = sorted(root.glob(pattern))
        if not found:
            raise SystemExit(f"LM corpus file(s) {root / pattern} not found; set "
                             "BLOCKDRAFT_SHARED_DATA to the shared data folder")
        files += found
    return files


def _shown(paths: Sequence[Path]) -> list[str]:
    """Paths as ``$BLOCKDRAFT_SHARED_DATA/...`` where they lie in the shared data."""
    out = []
    for p in paths:
        try:
            out.append("$BLOCKDRAFT_SHARED_DATA/" + str(p.resolve().relative_to(SHARED.resolve())))
        except ValueError:
            out.append(str(p))
    return out


def ensure_ngram(corpus: str, order: int, cache: Path) -> tuple[Path, dict[str, Any]]:
    """The n-gram LM over SmolLM2's token ids on corpus ``corpus``, trained once with
    ``blockdraft ngram train`` and cached: ``(binary, info)``."""
    from blockdraft.training.ngram.train import arpa_counts

    files = corpus_files(corpus)
    key = _key(order, MODEL, *[(f.name, f.stat().st_size) for f in files])
    prefix = cache / f"lm{order}-{MODEL}-{corpus}-{key}"
    binary, arpa = prefix.with_suffix(".bin"), prefix.with_suffix(".arpa")
    shown = ["blockdraft", "ngram", "train", "--text", *_shown(files), "--tokenizer", MODEL,
             "--order", str(order), "-o", str(prefix)]
    record = prefix.with_suffix(".command.json")
    if not (binary.is_file() and arpa.is_file() and record.is_file()):
        cache.mkdir(parents=True, exist_ok=True)
        log(f"training the {order}-gram LM over {MODEL} ids on {len(files)} corpus files "
            f"(once; cached in {cache})")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "blockdraft", "ngram", "train", "--text",
                        *map(str, files), "--tokenizer", MODEL, "--order", str(order),
                        "-o", str(prefix), "--overwrite"],  # what a broken run left
                       check=True, stdout=sys.stderr)
        from blockdraft.core.files import write_text_atomic

        write_text_atomic(record, json.dumps({"command": shlex.join(shown),
                                              "seconds": time.perf_counter() - start}) + "\n")
    counts = arpa_counts(arpa)
    return binary, {"name": prefix.name, "corpus": corpus, "files": _shown(files),
                    "order": order, "ngrams": int(sum(counts)), "counts": list(counts),
                    "command": json.loads(record.read_text())["command"]}


def neural_dir(choice: str, cache: Path, threads: int) -> tuple[Path | None, str]:
    """The RescorerLM folder for ``--neural`` (``auto``, ``off``, ``train`` or a folder), or
    None and why not."""
    default = cache / f"rescorer-{MODEL}-1l-d128"
    files = corpus_files("default")
    shown = shlex.join(["blockdraft", "train", "--rescorer", "--tokenizer", MODEL, *NEURAL_TRAIN,
                        "--threads", str(threads), "-o", str(default), "--corpus",
                        *_shown(files)])
    if choice == "off":
        return None, "not run (--neural off)"
    if choice == "auto":
        if (default / "config.json").is_file():
            return default, ""
        return None, (
            f"no RescorerLM over {MODEL}'s tokenizer (V = 49,152) is cached at {default}; "
            "training one (1 layer, d = 128) normalises over the whole vocabulary at every "
            "position, so it is not cheap on this CPU: run the benchmark with --neural train "
            f"(it runs `{shown}` once), or pass --neural FOLDER")
    if choice == "train":
        if not (default / "config.json").is_file():
            log(f"training the RescorerLM over {MODEL} ids (once): {shown}")
            subprocess.run([sys.executable, "-m", "blockdraft", "train", "--rescorer",
                            "--tokenizer", MODEL, *NEURAL_TRAIN, "--threads", str(threads),
                            "-o", str(default), "--corpus", *map(str, files)], check=True,
                           stdout=sys.stderr)
        return default, ""
    return Path(choice), ""


def _shown_path(path: Path) -> Path:
    """``path`` relative to the repository when it lies inside it."""
    try:
        return path.resolve().relative_to(REPO)
    except ValueError:
        return path


def build_peers(model: Any, keys: Sequence[str], threads: int, n_ctx: int,
                skipped: dict[str, str]) -> list[Any]:
    """The peers named in ``keys`` (``PEER_KEYS``); llama.cpp ones only when it imports."""
    from benchmarks.common.peers import HFGenerate, LlamaCpp, llama_cpp_missing, peer_name
    from blockdraft.models.hf.loading import smollm2_gguf

    out: list[Any] = []
    for key in keys:
        if key in ("hf", "hf-pld"):
            out.append(HFGenerate(model.base, lookup=None if key == "hf" else LOOKUP))
        elif key in ("llama", "llama-pld"):
            name = peer_name("llama.cpp", LOOKUP if key == "llama-pld" else None)
            why = llama_cpp_missing()
            if why is not None:
                skipped[name] = why
                continue
            out.append(LlamaCpp(smollm2_gguf(), threads, None if key == "llama" else LOOKUP,
                                n_ctx=n_ctx))
        else:
            raise SystemExit(f"unknown peer {key!r}; choose from {', '.join(PEER_KEYS)}")
    return out


def runtime_models(model: Any, args: Args) -> dict[str, Any]:
    """``{tag: model}`` for ``--runtimes`` (the torch model itself for torch:<dtype>; an ONNX
    Runtime export of it, made once and cached, for onnxruntime:<precision>)."""
    from blockdraft.models.runtimes import on_runtime

    out: dict[str, Any] = {}
    for spec in args.runtimes:
        runtime, precision = spec.split(":")
        if runtime == "torch":
            if precision != args.dtype:
                raise SystemExit(f"--runtimes {spec}: the torch model is loaded in --dtype "
                                 f"{args.dtype}")
            out[RUNTIME_TAGS[spec]] = model
        else:
            log(f"preparing {spec} (a first export takes about a minute, then it is cached)")
            out[RUNTIME_TAGS[spec]] = on_runtime(model, runtime, precision, threads=args.threads,
                                                 log=log)
    return out


# ---- command line --------------------------------------------------------------------------------


@dataclass
class Args:
    """The parsed command line (see ``parse_args``)."""

    preset: str
    tasks: list[str]
    prompts_per_task: int
    max_new_tokens: int
    prompt_tokens: int
    dtype: str
    threads: int
    heads: str
    k: int
    p: int
    alpha: float
    lm: str
    lm_corpus: str
    neural: str
    strategies: list[str]
    peers: list[str]
    iad_min_match: int
    p_verify: str
    seed: int
    out: Path
    runtimes: list[str] = field(default_factory=lambda: ["torch:float32"])
    also_heads: list[str] = field(default_factory=list)
    runtime_strategies: dict[str, list[str]] = field(default_factory=dict)
    tree_budget: int = 8
    context_weight: float = 0.0
    argv: list[str] = field(default_factory=list)
    task_prompts: dict[str, int] = field(default_factory=dict)


def parse_args(argv: list[str] | None = None) -> Args:
    from benchmarks.common.tasks import CHAT_TASKS, REAL_TASKS

    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--full", action="store_true",
                      help=f"{PRESETS['full'][0]} prompts per task (make bench-real)")
    mode.add_argument("--smoke", action="store_true",
                      help="1 prompt per task x 16 tokens, a small LM: checks the harness")
    ap.add_argument("--tasks", default=",".join(REAL_TASKS),
                    help=f"comma-separated, of: {', '.join(CHAT_TASKS)}")
    ap.add_argument("--task-prompts", default="",
                    help="prompts of some tasks instead of --prompts-per-task, e.g. chat=12")
    ap.add_argument("--prompts-per-task", type=int, default=None,
                    help="default: 3 (quick), 8 (--full), 1 (--smoke)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 128 (smoke 16)")
    ap.add_argument("--prompt-tokens", type=int, default=400,
                    help="longest prompt, chat template included (documents are cut to fit)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--threads", type=int, default=2, help="torch (and llama.cpp) threads")
    ap.add_argument("--heads", default=MODEL, help="smollm2 (the packaged heads) or a folder")
    ap.add_argument("--also-heads", default="",
                    help="comma-separated other heads on the same base (a known name such as "
                         "smollm2-prefix, or a heads folder), run beside --heads on every "
                         "runtime and interleaved per prompt; their strategies are tagged "
                         "TAG/NAME (e.g. 'default [ort32/smollm2-prefix]') and compared with "
                         "the runtime's one greedy loop")
    ap.add_argument("--k", type=int, default=16, help="lattice width of the p-best/rescored")
    ap.add_argument("--p", type=int, default=16, help="drafts per call of the p-best ones")
    ap.add_argument("--alpha", type=float, default=1.0, help="LM weight of the rescorers")
    ap.add_argument("--context-weight", type=float, default=0.0,
                    help="the context LM's weight in the n-gram strategies (0: none)")
    ap.add_argument("--lm", default="auto",
                    help="auto (train and cache a 4-gram over SmolLM2 ids), none, or a KenLM "
                         "binary over SmolLM2 ids")
    ap.add_argument("--lm-corpus", default=None, choices=tuple(LM_CORPORA),
                    help="pretraining-corpus subset of --lm auto (default: default; smoke: "
                         "small)")
    ap.add_argument("--neural", default="auto",
                    help="auto (a cached RescorerLM over SmolLM2 ids, if any), off, train "
                         "(train and cache one), or a RescorerLM folder")
    ap.add_argument("--strategies", default=",".join(STRATEGY_KEYS),
                    help=f"comma-separated, of: {', '.join(STRATEGY_KEYS)}")
    ap.add_argument("--peers", default=",".join(PEER_KEYS),
                    help=f"comma-separated, of: {', '.join(PEER_KEYS)}; or none")
    ap.add_argument("--iad-min-match", type=int, default=2)
    ap.add_argument("--p-verify", default="batch", choices=("batch", "trie"),
                    help="trie: name the p > 1 rows '(trie)' (every step verifies its drafts "
                         "as one trie either way: the same output and B)")
    ap.add_argument("--runtimes", default="torch:float32",
                    help="comma-separated runtime:precision of the blockdraft model, of: "
                         f"{', '.join(RUNTIME_TAGS)}; the first one's greedy loop is the "
                         "reference, every other runtime's greedy loop runs too")
    ap.add_argument("--runtime-strategies", default="",
                    help="per runtime tag, the strategies to run there instead of "
                         "--strategies, e.g. 'pt32=vanilla,lookup;ort8=vanilla,lookup' (tags: "
                         f"{', '.join(RUNTIME_TAGS.values())}; TAG/NAME for --also-heads NAME)")
    ap.add_argument("--tree-budget", type=int, default=8,
                    help="nodes of the rescored tree (rescored-tree strategy)")
    ap.add_argument("--seed", type=int, default=0, help="which prompts of each task")
    ap.add_argument("--out", type=Path, default=None, help="results folder")
    a = ap.parse_args(argv)
    preset = "full" if a.full else "smoke" if a.smoke else "quick"
    per_task, max_new, out, corpus = PRESETS[preset]
    tasks = [t for t in a.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in CHAT_TASKS]
    if unknown:
        ap.error(f"unknown task(s) {unknown}; choose from {', '.join(CHAT_TASKS)}")
    strategies = [s for s in a.strategies.split(",") if s]
    if set(strategies) - set(STRATEGY_KEYS):
        ap.error(f"--strategies: choose from {', '.join(STRATEGY_KEYS)}")
    peers = [] if a.peers == "none" else [s for s in a.peers.split(",") if s]
    if set(peers) - set(PEER_KEYS):
        ap.error(f"--peers: choose from {', '.join(PEER_KEYS)} or none")
    runtimes = [r for r in a.runtimes.split(",") if r]
    if not runtimes or set(runtimes) - set(RUNTIME_TAGS):
        ap.error(f"--runtimes: choose from {', '.join(RUNTIME_TAGS)}")
    per_runtime: dict[str, list[str]] = {}
    for part in filter(None, a.runtime_strategies.split(";")):
        tag, _, keys = part.partition("=")
        chosen = [k for k in keys.split(",") if k]
        if own_runtime(tag) not in RUNTIME_TAGS.values() or set(chosen) - set(STRATEGY_KEYS):
            ap.error(f"--runtime-strategies {part!r}: a tag of {', '.join(RUNTIME_TAGS.values())}"
                     f" (or TAG/NAME for --also-heads NAME) = strategies of "
                     f"{', '.join(STRATEGY_KEYS)}")
        per_runtime[tag] = chosen
    args = Args(
        preset=preset, tasks=tasks,
        prompts_per_task=a.prompts_per_task if a.prompts_per_task is not None else per_task,
        task_prompts=_task_prompts(ap, a.task_prompts),
        max_new_tokens=a.max_new_tokens if a.max_new_tokens is not None else max_new,
        prompt_tokens=a.prompt_tokens, dtype=a.dtype, threads=a.threads, heads=a.heads,
        k=a.k, p=a.p, alpha=a.alpha, lm=a.lm, lm_corpus=a.lm_corpus or corpus,
        neural=a.neural, strategies=strategies, peers=peers, iad_min_match=a.iad_min_match,
        p_verify=a.p_verify, runtimes=runtimes, runtime_strategies=per_runtime,
        also_heads=[h for h in a.also_heads.split(",") if h],
        tree_budget=a.tree_budget, context_weight=a.context_weight,
        seed=a.seed, out=a.out or out,
        argv=list(sys.argv[1:] if argv is None else argv))
    for name in ("prompts_per_task", "max_new_tokens", "prompt_tokens", "threads", "k", "p",
                 "iad_min_match", "tree_budget"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def _task_prompts(ap: argparse.ArgumentParser, text: str) -> dict[str, int]:
    """``--task-prompts chat=12,qa-squad=3`` as ``{task: prompts}``."""
    out: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        task, _, value = part.partition("=")
        if not value.isdigit() or int(value) < 1:
            ap.error(f"--task-prompts {part!r}: expected TASK=N with N >= 1")
        out[task] = int(value)
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    from blockdraft.core.files import cache_dir
    from blockdraft.core.signature import environment
    from blockdraft.models import load_model

    args = parse_args(argv)
    wall = time.perf_counter()
    torch.set_num_threads(args.threads)
    cache = cache_dir("bench", "real")
    log(f"loading {MODEL} ({args.dtype}, heads {args.heads}, {args.threads} threads)")
    model = load_model(MODEL, dtype=args.dtype,
                       heads=None if args.heads == MODEL else heads_folder(args.heads))
    tok = model.tokenizer
    models = runtime_models(model, args)
    for heads in args.also_heads:  # other heads on the same base: TAG/NAME
        heads_dir = heads_folder(heads)
        log(f"loading {MODEL} with the heads {heads_dir.name} ({args.dtype})")
        other = load_model(MODEL, dtype=args.dtype, heads=heads_dir)
        models.update({f"{tag}/{heads_dir.name}": m
                       for tag, m in runtime_models(other, args).items()})
    cases = build_cases(tok, args.tasks, args.prompts_per_task, args.prompt_tokens, args.seed,
                        per_task=args.task_prompts)
    skipped: dict[str, str] = {}
    lm = lm_info = None
    if args.lm != "none":
        from blockdraft.rescorers.ngram import NgramLM

        if args.lm == "auto":
            path, lm_info = ensure_ngram(args.lm_corpus, 4, cache)
        else:
            path, lm_info = Path(args.lm), {"name": Path(args.lm).name}
        lm = NgramLM(path)
        lm.check_vocab(model.config.vocab_size, tokenizer=tok)
        lm_info = {**lm_info, "order": lm.order}
    neural = None
    folder, why = neural_dir(args.neural, cache, args.threads)
    if folder is not None:
        from blockdraft.rescorers.neural import NeuralRescorer

        neural = NeuralRescorer(folder, alpha=args.alpha, backend="onnx")
    else:
        skipped["neural"] = why
    lm_label = "-" if lm_info is None else f"{lm_info['name']}({lm_info.get('ngrams', '?')})"
    neural_label = "-" if folder is None else folder.name
    strategies: list[Strategy] = []
    tagged = len(models) > 1
    for tag in models:
        mine = build_strategies(
            k=args.k, p=args.p, alpha=args.alpha, lm=lm, lm_label=lm_label, neural=neural,
            neural_label=neural_label, iad_min_match=args.iad_min_match,
            only=args.runtime_strategies.get(tag, args.strategies),
            trie=args.p_verify == "trie", skipped=skipped, runtime=tag, tagged=tagged,
            tree_budget=args.tree_budget, context_weight=args.context_weight)
        if own_runtime(tag) != tag:  # other heads, same base: the runtime's greedy loop serves
            mine = mine[1:]
        strategies += mine
    n_ctx = max(512, args.prompt_tokens + args.max_new_tokens + 64)
    peers = build_peers(model, args.peers, args.threads, n_ctx, skipped)
    log(f"{len(cases)} prompts x ({len(strategies)} strategies + {len(peers)} peers)")
    result = run_benchmark(models, cases, strategies, peers,
                           max_new_tokens=args.max_new_tokens, eos_id=tok.eos_id, progress=True)
    fields = {
        "model": f"{MODEL}(SmolLM2-135M-Instruct)", "heads": "+".join(
            heads_label(h) for h in (args.heads, *args.also_heads)),
        "dtype": args.dtype, "runtimes": "+".join(models), "threads": args.threads,
        "h": model.h, "k": args.k, "tree_budget": args.tree_budget,
        "p": f"1,{args.p}", "p_verify": args.p_verify, "alpha": args.alpha, "lm": lm_label,
        "context_weight": args.context_weight,
        "neural": neural_label, "tasks": "+".join(args.tasks),
        "prompts_per_task": str(args.prompts_per_task) + "".join(
            f",{t}={n}" for t, n in args.task_prompts.items()),
        "max_new_tokens": args.max_new_tokens,
        "prompt_tokens": args.prompt_tokens, "criterion": "exact", "seed": args.seed,
        "torch": torch.__version__, **environment("cpu"),
    }
    notes = [
        f"The heads are {fields['heads']}; the README of each heads folder ("
        + ", ".join(str(_shown_path(heads_folder(h)) / "README.md")
                    for h in (args.heads, *args.also_heads))
        + ") says how they were trained; strategies tagged TAG/NAME run the heads NAME.",
        "The 'explain' prompts were written for this benchmark on the topics of the pretraining "
        "corpus, on a subset of which the n-gram LM is trained: that task may favour the "
        "n-gram rescorers.",
        "llama.cpp runs the GGUF file's own quantised weights (Q4_1) with its own kernels "
        "(flash attention on: the greedy whose batched rows equal its one-token steps); "
        "blockdraft and transformers run the same weights dequantised (exactly) to float32, "
        "then cast to the benchmark's dtype, except blockdraft on onnxruntime:q4 (ort4), which "
        "runs the file's own blocks (ONNX Runtime MatMulNBits, int8 activations; one draft a "
        "step: its token trees are not lossless).",
    ]
    if lm_info is not None:
        notes.append(f"n-gram LM: {lm_info.get('ngrams', '?')} n-grams, made by "
                     f"`{lm_info.get('command', args.lm)}`.")
    command = "python -m benchmarks.bench_real " + shlex.join(args.argv)
    report = make_report(result, cases, strategies, peers, fields=fields,
                         command=command.strip(), skipped=skipped,
                         wall_s=time.perf_counter() - wall, notes=notes,
                         decode_text=lambda ids: tok.decode(ids))
    report["lm"] = lm_info
    paths = write_report(report, args.out)
    print(markdown(report))
    log("wrote " + ", ".join(str(p) for p in paths))
    if report["errors"]:
        log(f"{len(report['errors'])} run(s) failed: see the Errors section of the report")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
