"""Token trees at equal budget on SmolLM2 with its Medusa heads (issue 12).

    .venv/bin/python -m benchmarks.bench_trees            # quick: 2 prompts per task
    .venv/bin/python -m benchmarks.bench_trees --full     # make bench-trees: 4 per task
    .venv/bin/python -m benchmarks.bench_trees --smoke    # 1 prompt per task x 16 tokens

What it does, in order (each stage logs its progress on stderr):

1. **Traces** (recorded once, cached under ``$BLOCKDRAFT_CACHE/bench/trees``): the greedy
   continuation of every benchmark prompt (the real-model benchmark's chat tasks,
   ``benchmarks/common/tasks.py``, never distillation prompts) with the top-``K`` of every head at
   every position (``blockdraft.oracle.record_trace``); and a *calibration* trace over held-out
   distillation prompts (never used to train the heads): Medusa's calibrated tree is built from
   its per-depth, per-rank head accuracies, and the rescored tree's ``alpha`` is chosen on it.
2. **B at equal budget, offline**: every tree builder at every budget ``N`` (nodes per verification
   forward, the root included) is simulated over the benchmark trace
   (``blockdraft.oracle.simulate``: the accepted length of a tree is its longest root path that
   matches the greedy continuation, exactly the online decode's). Builders, all over the same
   top-``k`` lattice: the vanilla chain (h nodes at most), the tries of the p-best drafts by
   head score (0-gram) and by the exact 4-gram rescorer, Medusa's ``mc_sim_7b_63`` (N = 64),
   Medusa's calibrated tree, an EAGLE-2-style confidence tree (the N nodes of highest cumulative
   head log-prob) and the lattice-rescored tree (best-first by head + alpha x 4-gram score of the
   path, so children depend on their parents). The time each builder takes per step is measured
   in the same pass.
3. **Costs**: the median wall time of one tree verification as decode runs it
   (``Verifier.run`` with the lattice width: forward over N nodes with the tree mask on the
   prompt's cache, acceptance, cache gather, the next step's heads as their top-k) for every N,
   of the step's lattice from those top-k, and of one step of the reference greedy loop
   (``greedy_generate``'s per-token cost). (Runs before 2026-11-27 timed ``verify_tree``, whose
   heads project over the whole vocabulary: a larger cost than decode pays.)
4. **Estimated speedup** per builder and N: ``B x greedy step / (verification(N) + lattice +
   building)``, the decode loop's own costs, measured on this machine in this run.
5. **Measured speedup**: the online decode (``decode(drafter=builder)``, exact criterion) against
   the reference greedy loop on one prompt per task (``--online-max-new-tokens``, 64) for the
   chosen builders and budgets (``--online-builders``, ``--online-budgets``), timed end to
   end; its output must equal greedy's token for token.

Writes ``benchmarks/results/trees/trees.{md,json,png}`` (``--full``; quick: ``trees/quick/``,
smoke: ``trees/smoke/``) with the command and a signature of every setting.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_real import ensure_ngram
from benchmarks.common.data import SHARED, _key
from benchmarks.common.real_model import MODEL, build_cases, heads_folder, heads_label
from benchmarks.common.report import log
from benchmarks.common.tree_report import make_report, markdown, write_report

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "trees"
PRESETS = {  # prompts per task, max new tokens, calibration prompts, results, LM corpus
    "smoke": (1, 16, 4, RESULTS / "smoke", "small"),
    "quick": (2, 96, 24, RESULTS / "quick", "default"),
    "full": (4, 128, 32, RESULTS, "default"),
}
BUDGETS = (4, 8, 16, 32, 64)
ALPHAS = (0.25, 0.5, 1.0)
BUILDERS = ("chain", "trie-0gram", "trie-4gram", "trie-neural", "mc_sim_7b_63", "calibrated",
            "eagle2", "rescored-4gram", "rescored-neural", "tree-lattice")
RESCORED = ("rescored-4gram", "rescored-neural")
DECODED = ("tree-lattice",)
"""Builders whose B is decoded, not simulated: the tree lattice of prefix-conditioned heads
expands a node by a head evaluation the trace does not hold (it holds the chain's top-k), so its
B comes from ``decode`` over the trace's own prompts, lengths and EOS (exact criterion: tokens
and calls are what the simulator would count, and the output is checked against the trace's
greedy continuation)."""


# ---- the builders --------------------------------------------------------------------------------

NAMES = {"chain": "chain (vanilla)", "trie-0gram": "p-best trie 0-gram",
         "trie-4gram": "p-best trie 4-gram", "trie-neural": "p-best trie neural",
         "mc_sim_7b_63": "Medusa mc_sim_7b_63", "calibrated": "Medusa calibrated",
         "eagle2": "EAGLE-2-style confidence", "rescored-4gram": "lattice-rescored 4-gram",
         "rescored-neural": "lattice-rescored neural", "tree-lattice": "tree-lattice confidence"}
"""Each builder's name in the rows and the report."""


class TimedTree:
    """A drafter that adds up the seconds and nodes of another's trees per step: this
    benchmark's own wrapper around the builder it times (a
    :class:`~blockdraft.drafts.Drafter`: ``name``, ``needs``, ``draft(view)``,
    ``observe(feedback)``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = str(inner.name)
        self.needs = inner.needs
        self.seconds, self.calls, self.nodes = 0.0, 0, 0

    def draft(self, view: Any) -> Any:
        start = time.perf_counter()
        tree = self.inner.draft(view)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.nodes += tree.num_nodes
        return tree

    def observe(self, feedback: Any) -> None:
        self.inner.observe(feedback)


def make_builder(key: str, budget: int, *, k: int, lm: Any, alpha: float,
                 accuracies: np.ndarray, neural: Any = None, neural_dir: Path | None = None,
                 alphas: dict[str, float] | None = None, conditional: bool = False
                 ) -> Any | None:
    """The builder ``key`` at budget ``budget``: a :class:`~blockdraft.drafts.DraftSpec` (which
    ``simulate`` and ``decode`` build), or a drafter where no spec names it (below); None
    where it has no tree of that size, or lacks its LM. ``lm``: the n-gram LM (an ``NgramLM``:
    its file names the spec's LM); ``neural``: a ``NeuralPathScorer``; ``neural_dir``: its
    RescorerLM folder (the neural p-best trie's rescorer); ``alphas``: the alpha fitted for
    each rescored tree, which the p-best trie over the same LM uses too (else ``alpha``);
    ``conditional``: the model's heads are prefix-conditioned (the tree lattice exists)."""
    from blockdraft.drafts import (
        ConditionalTreeDrafter,
        DraftSpec,
        TrieDrafter,
        calibrated_tree_drafter,
    )

    fitted = alphas or {}
    ngram = None if lm is None else str(lm.path)
    if key in ("chain", "trie-0gram", "trie-4gram", "trie-neural"):
        # the heads' p = N best as one trie, cut to its first N nodes: the spec names the
        # drafts, the fixed cut (no DraftSpec field) is put on the drafter it builds
        if key == "chain":
            spec = DraftSpec("heads")
        elif key == "trie-0gram":
            spec = DraftSpec("heads", k=k, p=budget)
        elif key == "trie-4gram":
            if ngram is None:
                return None
            spec = DraftSpec("heads", k=k, p=budget, rescorer="ngram", lm=ngram,
                             alpha=fitted.get("rescored-4gram", alpha))
        else:
            if neural_dir is None:
                return None
            from blockdraft.rescorers.neural import NeuralRescorer

            # a RescorerLM on ONNX Runtime, which no spec names by file: given as an object
            a = fitted.get("rescored-neural", alpha)
            spec = DraftSpec("heads", k=k, p=budget, rescorer="given", alpha=a,
                             given=NeuralRescorer(neural_dir, alpha=a, backend="onnx"))
        return TrieDrafter(spec.build(), budget=budget, name=NAMES[key])
    if key == "mc_sim_7b_63":
        return DraftSpec("tree", tree="medusa", budget=64) if budget == 64 else None
    if key == "calibrated":
        # rank paths chosen from accuracies measured on the calibration trace (an array in
        # memory, no spec field)
        return calibrated_tree_drafter(accuracies[:, :k], budget)
    if key == "eagle2":
        return DraftSpec("tree", tree="confidence", k=k, budget=budget)
    alpha = fitted.get(key, alpha)
    if key == "rescored-4gram":
        return None if ngram is None else DraftSpec(
            "tree", tree="rescored", k=k, budget=budget, rescorer="ngram", lm=ngram,
            alpha=alpha)
    if key == "rescored-neural":
        # the benchmark's NeuralPathScorer (its max_depth the model's h): given as an object
        return None if neural is None else DraftSpec(
            "tree", tree="rescored", k=k, budget=budget, rescorer="given", given=neural,
            alpha=alpha)
    if key == "tree-lattice":
        # EAGLE-2's tree of exactly N nodes over the tree lattice, no cost curve: the spec's
        # tree-lattice strategy always grows its tree while it pays on a cost curve
        return ConditionalTreeDrafter(k=k, budget=budget, name=NAMES[key]) \
            if conditional else None
    raise ValueError(f"unknown builder {key!r}; choose from {', '.join(BUILDERS)}")


def built(builder: Any, model: Any = None) -> Any:
    """The drafter of a builder: a spec built by the factory (on ``model``'s capabilities, as
    ``decode`` builds it; without a model, as ``simulate`` does), a drafter as it is."""
    from blockdraft.drafts import DraftSpec
    from blockdraft.models.capabilities import capabilities_of

    if not isinstance(builder, DraftSpec):
        return builder
    return builder.build(caps=None if model is None else capabilities_of(model))


# ---- traces --------------------------------------------------------------------------------------


def cached_trace(model: Any, prompts: Sequence[Sequence[int]], what: str, label: str,
                 max_new: int, K: int, eos: int | None, cache: Path) -> Any:
    """The trace of ``prompts`` (recorded once per model, prompts and settings; cached)."""
    from blockdraft.oracle import Trace
    from blockdraft.oracle.record import record_trace

    path = cache / f"{what}-{_key(what, label, K, max_new, eos, *prompts)}"
    if (path / "meta.json").is_file():
        return Trace.open(path)
    log(f"recording the {what} trace: {len(prompts)} prompts x {max_new} tokens (once)")
    return record_trace(model, prompts, path, max_new_tokens=max_new, eos_id=eos, K=K,
                        overwrite=True, signature={"model": label, "set": what},
                        progress=_progress(f"{what} trace"))


def heldout_distill_prompts(tokenizer: Any, n: int, data_root: Path = SHARED) -> list[list[int]]:
    """``n`` held-out distillation prompts in the chat template: the split head training
    holds out (``split_prompts`` with the distillation defaults), so no head saw them."""
    import inspect

    from blockdraft.training.heads.distill import distill
    from blockdraft.training.heads.prompts import read_prompts, split_prompts

    files = sorted((data_root / "prompts").glob("distill_prompts.part*.jsonl"))
    if not files:
        raise SystemExit(f"no distillation prompts under {data_root / 'prompts'}; set "
                         "BLOCKDRAFT_SHARED_DATA to the shared data folder")
    texts = read_prompts(files)
    defaults = {k: v.default for k, v in inspect.signature(distill).parameters.items()}
    _, held = split_prompts(len(texts), seed=defaults["seed"],
                            fraction=defaults["heldout_fraction"], minimum=defaults["heldout_min"])
    chosen = [texts[i] for i in held[:n].tolist()]
    ids = (tokenizer.apply_chat_template([{"role": "user", "content": t}]) for t in chosen)
    return [p for p in ids if len(p) <= 400][:n]


def _progress(what: str) -> Any:
    def wrap(items: Sequence[Any]) -> Any:
        items = list(items)
        start = time.perf_counter()
        for i, item in enumerate(items):
            yield item
            log(f"{what}: {i + 1}/{len(items)} prompts ({time.perf_counter() - start:.0f} s)")
    return wrap


# ---- simulation ----------------------------------------------------------------------------------


def simulate_builders(trace: Any, cases: Sequence[Any], budgets: Sequence[int],
                      keys: Sequence[str], model: Any = None, eos: int | None = None,
                      **make: Any) -> list[dict[str, Any]]:
    """B per task (pooled tokens / calls over the task's examples) and the building cost per
    step, for every builder and budget (the ``DECODED`` ones decoded by ``model``)."""
    from blockdraft.oracle import simulate

    rows = []
    for budget in budgets:
        for key in keys:
            inner = make_builder(key, budget, **make)
            if inner is None:
                continue
            start = time.perf_counter()
            if key in DECODED:
                per_task, nodes, build_ms = decode_builder(model, trace, cases, inner, eos)
            else:
                timed = TimedTree(built(inner))
                per_task = {}
                for task, idx in _task_examples(cases).items():
                    per_task[task] = float(simulate(trace, timed, examples=idx)
                                           .block_efficiency)
                nodes = timed.nodes / max(1, timed.calls)
                build_ms = 1e3 * timed.seconds / max(1, timed.calls)
            rows.append({"builder": key, "name": NAMES[key], "N": budget,
                         "B": per_task, "B_mean": float(np.mean(list(per_task.values()))),
                         "nodes": nodes, "build_ms": build_ms,
                         "decoded": key in DECODED})
            log(f"N = {budget:>2} {NAMES[key]:<28} B {rows[-1]['B_mean']:.3f}  nodes "
                f"{rows[-1]['nodes']:.1f}  build {rows[-1]['build_ms']:.2f} ms  "
                f"({time.perf_counter() - start:.0f} s)")
    return rows


def decode_builder(model: Any, trace: Any, cases: Sequence[Any], builder: Any,
                   eos: int | None) -> tuple[dict[str, float], float, float]:
    """``(B per task, nodes per step, drafting ms per step)`` of ``builder`` decoded online
    over the trace's examples (prompt, length and EOS of each), B pooled per task as the
    simulator pools it, nodes and ms of the builder's own trees as :class:`TimedTree` counts
    them while simulating.

    Raises:
        SystemExit: a decode's output differs from the trace's greedy continuation (the trace
            and the model disagree, so neither B would be the other's).
    """
    from blockdraft.core.efficiency import block_efficiency
    from blockdraft.verify import decode

    per_task: dict[str, float] = {}
    timed = TimedTree(built(builder, model))
    for task, idx in _task_examples(cases).items():
        tokens = calls = 0
        for i in idx:
            example = trace[i]
            want = [int(t) for t in example.greedy_ids]
            res = decode(model, [int(t) for t in example.prompt_ids], drafter=timed,
                         criterion="exact", max_new_tokens=len(want), eos_id=eos)
            if list(res.tokens) != want:
                raise SystemExit(f"{timed.name}: example {i} ({task}) decoded other tokens "
                                 "than the trace's greedy continuation; re-record the trace "
                                 "with this model")
            tokens, calls = tokens + len(want), calls + res.calls
        per_task[task] = float(block_efficiency(tokens, calls))
    steps = max(1, timed.calls)
    return per_task, timed.nodes / steps, 1e3 * timed.seconds / steps


def _task_examples(cases: Sequence[Any]) -> dict[str, list[int]]:
    """Trace example indices per task (example ``i`` is case ``i``)."""
    out: dict[str, list[int]] = {}
    for i, case in enumerate(cases):
        out.setdefault(case.task, []).append(i)
    return out


def choose_alpha(trace: Any, key: str, budget: int, alphas: Sequence[float], **make: Any
                 ) -> tuple[float, dict[str, float]]:
    """The rescored tree ``key``'s alpha with the highest B on the calibration trace at
    ``budget`` (``(1.0, {})`` when the builder lacks its LM)."""
    from blockdraft.oracle import simulate

    scores: dict[str, float] = {}
    if len(alphas) == 1:  # nothing to choose from: no simulation
        return float(alphas[0]), {}
    for alpha in alphas:
        builder = make_builder(key, budget, **{**make, "alpha": alpha})
        if builder is None:
            return 1.0, {}
        scores[f"{alpha:g}"] = float(simulate(trace, builder).block_efficiency)
        log(f"calibration: {key} alpha {alpha:g} -> B {scores[f'{alpha:g}']:.3f} "
            f"(N = {budget})")
    best = max(alphas, key=lambda a: scores[f"{a:g}"])
    return best, scores


# ---- costs ---------------------------------------------------------------------------------------


def measure_costs(model: Any, prompt: Sequence[int], budgets: Sequence[int], k: int,
                  repeats: int) -> dict[str, Any]:
    """Median ms of one tree verification per N, of the lattice, and of a greedy step.

    The measurements are interleaved (each round times every size, the lattice and a greedy
    run once), so a slow spell of a shared machine lands on all of them alike rather than on
    whichever was being timed then."""
    import torch

    from blockdraft.drafts import confidence_tree
    from blockdraft.lattice.step import step_lattice
    from blockdraft.models import greedy_generate
    from blockdraft.verify import Verifier

    verifier = Verifier(model)
    with torch.no_grad():
        logits, past = verifier.prefill(list(prompt))
        first = verifier.run(past, confidence_tree(step_lattice(logits, None, k), 1), None,
                             None, k)  # the heads' top-k at a node, as decode reads them
    length = past.length
    lattice = step_lattice(first.next_logits, first.next_topk, k)
    trees = {n: confidence_tree(lattice, n) for n in budgets}
    steps = 8

    def clock(fn: Any) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    # what decode runs a step: the forward over the tree, acceptance, the cache gather and the
    # next step's heads as their top-k at the accepted node (not full-vocabulary logits)
    jobs: dict[str, Any] = {str(n): (lambda t=t: verifier.run(past, t, None, None, k))
                            for n, t in trees.items()}
    jobs["lattice"] = lambda: step_lattice(first.next_logits, first.next_topk, k)
    jobs["greedy-long"] = lambda: greedy_generate(model, list(prompt), steps + 1)
    jobs["greedy-short"] = lambda: greedy_generate(model, list(prompt), 1)
    times: dict[str, list[float]] = {name: [] for name in jobs}
    for fn in jobs.values():  # warm-up
        fn()
    for r in range(repeats):
        for name, fn in jobs.items():
            times[name].append(clock(fn))
        if past.length != length:
            raise RuntimeError("verify_tree changed the cache it was given")
        log(f"costs: round {r + 1}/{repeats}")
    ms = {name: 1e3 * float(np.median(ts)) for name, ts in times.items()}
    verify_ms = {str(n): ms[str(n)] for n in budgets}
    greedy_ms = (ms["greedy-long"] - ms["greedy-short"]) / steps
    log("verification ms by tree size: " + ", ".join(f"{n}: {v:.1f}"
                                                      for n, v in verify_ms.items())
        + f"; lattice {ms['lattice']:.2f} ms; greedy step {greedy_ms:.1f} ms (prefix {length})")
    return {"verify_ms": verify_ms, "lattice_ms": ms["lattice"], "greedy_ms": greedy_ms,
            "prefix": length, "rounds": repeats}


# ---- online --------------------------------------------------------------------------------------


def run_online(model: Any, cases: Sequence[tuple[int, Any]], rows: Sequence[dict[str, Any]],
               budgets: Sequence[int], keys: Sequence[str], max_new: int,
               eos: int | None, **make: Any) -> list[dict[str, Any]]:
    """Reference greedy and every chosen builder decoded online on each ``(trace example
    index, case)``; per run the wall time, tokens, calls and whether the output equals
    greedy's."""
    from blockdraft.models import greedy_generate
    from blockdraft.verify import decode

    out = []
    todo = [(key, n) for n in budgets for key in keys
            if any(r["builder"] == key and r["N"] == n for r in rows)]
    for done, (i, case) in enumerate(cases):
        greedy_generate(model, list(case.ids), 2, eos_id=eos)  # warm the allocator
        start = time.perf_counter()
        ref = greedy_generate(model, list(case.ids), max_new, eos_id=eos)
        ref_s = time.perf_counter() - start
        out.append({"case": i, "task": case.task, "builder": "greedy", "N": 1, "tokens": len(ref),
                    "calls": len(ref), "wall_s": ref_s, "identical": True})
        for key, n in todo:
            builder = make_builder(key, n, **make)
            start = time.perf_counter()
            res = decode(model, list(case.ids), drafter=builder, criterion="exact",
                         max_new_tokens=max_new, eos_id=eos)
            wall = time.perf_counter() - start
            out.append({"case": i, "task": case.task, "builder": key, "N": n,
                        "tokens": len(res.tokens),
                        "calls": res.calls, "wall_s": wall,
                        "forward_s": sum(s.forward_s for s in res.steps),
                        "draft_s": res.draft_s, "identical": list(res.tokens) == ref})
        log(f"online: prompt {done + 1}/{len(cases)} ({case.task}) done")
    return out


# ---- main ----------------------------------------------------------------------------------------


def lm_file(choice: str, corpus: str) -> tuple[Path, dict[str, Any]]:
    """``(binary, info)`` of ``--lm``: the cached corpus 4-gram, or a given KenLM binary."""
    from blockdraft.core.files import cache_dir
    from blockdraft.training.ngram.train import arpa_counts

    if choice == "auto":
        return ensure_ngram(corpus, 4, cache_dir("bench", "real"))
    path = Path(choice)
    arpa = path.with_suffix(".arpa")
    if not path.is_file() or not arpa.is_file():
        raise SystemExit(f"--lm {choice}: needs the KenLM binary and its .arpa beside it")
    counts = arpa_counts(arpa)
    return path, {"name": path.stem, "order": len(counts), "ngrams": int(sum(counts)),
                  "counts": list(counts), "command": f"(given: {choice})"}


@dataclass(frozen=True)
class Args:
    preset: str
    model: str
    heads: str
    blockwise_prompts: int
    threads: int
    dtype: str
    k: int
    budgets: tuple[int, ...]
    lm: str
    neural: str | None
    alphas: tuple[float, ...]
    builders: tuple[str, ...]
    online_budgets: tuple[int, ...]
    online_builders: tuple[str, ...]
    online_max_new: int
    repeats: int
    seed: int
    out: Path
    argv: tuple[str, ...]


def parse_args(argv: list[str] | None = None) -> Args:
    raw = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_const", dest="preset", const="full")
    size.add_argument("--smoke", action="store_const", dest="preset", const="smoke")
    ap.add_argument("--model", choices=("smollm2", "blockwise"), default="smollm2",
                    help="smollm2 (the packaged heads; chat tasks) or blockwise (the small "
                         "self-trained model of `blockdraft demo --blockwise`, pydoc paragraphs)")
    ap.add_argument("--heads", default=MODEL,
                    help="--model smollm2: its heads, a known name (smollm2: the packaged "
                         "Medusa heads; smollm2-prefix: the packaged prefix heads, whose tree "
                         "lattice the tree-lattice builder searches) or a heads folder")
    ap.add_argument("--blockwise-prompts", type=int, default=24,
                    help="held-out paragraphs of the blockwise benchmark (the rest calibrate)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: see NOTES)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--k", type=int, default=10, help="lattice width of every builder")
    ap.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS))
    ap.add_argument("--builders", nargs="+", default=list(BUILDERS), choices=BUILDERS)
    ap.add_argument("--online-budgets", type=int, nargs="*", default=[16, 32])
    ap.add_argument("--online-builders", nargs="*", choices=BUILDERS,
                    default=["calibrated", "eagle2", "rescored-4gram", "rescored-neural"])
    ap.add_argument("--online-max-new-tokens", type=int, default=64,
                    help="tokens per online decode (the traces use the preset's)")
    ap.add_argument("--lm", default="auto",
                    help="the rescorers' n-gram LM: auto (the real-model benchmark's 4-gram "
                         "over SmolLM2 ids of the pretraining corpus, trained once and cached), "
                         "or a KenLM binary over SmolLM2 ids (with its .arpa beside it)")
    ap.add_argument("--neural", default=None,
                    help="--model smollm2: a RescorerLM folder over SmolLM2 ids for the neural "
                         "builders (default: none, they are left out); --model blockwise uses "
                         "the demo's")
    ap.add_argument("--alphas", type=float, nargs="+", default=list(ALPHAS),
                    help="the rescored trees' alpha grid, fitted on the calibration trace (one "
                         "value: taken as it is)")
    ap.add_argument("--repeats", type=int, default=15, help="timed repeats per cost")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(raw)
    preset = a.preset or "quick"
    if a.k < 10 and "mc_sim_7b_63" in a.builders:
        ap.error("mc_sim_7b_63 reads ranks 0-9: use --k 10 or more, or leave it out")
    out = a.out or (PRESETS[preset][3] / "blockwise" if a.model == "blockwise"
                    else PRESETS[preset][3])
    if a.model == "blockwise" and a.heads != MODEL:
        ap.error("--heads is for --model smollm2 (the blockwise model has its own heads)")
    return Args(preset=preset, model=a.model, heads=a.heads, blockwise_prompts=a.blockwise_prompts,
                threads=a.threads, dtype=a.dtype, k=a.k, budgets=tuple(a.budgets), lm=a.lm,
                neural=a.neural, alphas=tuple(a.alphas), builders=tuple(a.builders),
                online_budgets=tuple(a.online_budgets),
                online_builders=tuple(a.online_builders),
                online_max_new=a.online_max_new_tokens, repeats=a.repeats, seed=a.seed,
                out=out, argv=tuple(raw))


@dataclass
class Setup:
    """What a run measures: the model, its prompts and LMs (see :func:`smollm2_setup`,
    :func:`blockwise_setup`)."""

    model: Any
    fields: dict[str, Any]
    cases: list[Any]
    calibration: list[list[int]]
    online: list[tuple[int, Any]]
    eos: int | None
    max_new: int
    lm_path: Path
    lm_info: dict[str, Any]
    neural: Any = None
    neural_dir: Path | None = None


def smollm2_setup(args: Args) -> Setup:
    """SmolLM2 with its packaged heads, the real-model benchmark's chat tasks, held-out
    distillation prompts for calibration."""
    from benchmarks.common.tasks import REAL_TASKS
    from blockdraft.models import load_model

    per_task, max_new, n_cal, _, corpus = PRESETS[args.preset]
    log(f"loading {MODEL} ({args.dtype}, heads {args.heads}, {args.threads} threads)")
    model = load_model(MODEL, dtype=args.dtype,
                       heads=None if args.heads == MODEL else heads_folder(args.heads))
    tok = model.tokenizer
    cases = build_cases(tok, REAL_TASKS, per_task, 400, args.seed)
    lm_path, lm_info = lm_file(args.lm, corpus)
    fields = {"model": f"{MODEL}(SmolLM2-135M-Instruct)", "heads": heads_label(args.heads),
              "dtype": args.dtype, "tasks": "+".join(REAL_TASKS), "prompts_per_task": per_task,
              "calibration": f"{n_cal} held-out distillation prompts"}
    online = [next((i, c) for i, c in enumerate(cases) if c.task == t) for t in REAL_TASKS]
    neural = neural_dir = None
    if args.neural:
        from blockdraft.rescorers.neural import NeuralPathScorer

        neural_dir = Path(args.neural)
        rescorer = load_model(neural_dir).eval()
        neural = NeuralPathScorer(rescorer, max_depth=model.h)
        fields["rescorer"] = f"{neural_dir.name}({rescorer.config.n_layer}L," \
                             f"d{rescorer.config.d_model})"
    return Setup(model, fields, cases, heldout_distill_prompts(tok, n_cal), online, tok.eos_id,
                 max_new, lm_path, lm_info, neural, neural_dir)


def blockwise_setup(args: Args) -> Setup:
    """The small self-trained BlockwiseLM of ``blockdraft demo --blockwise`` (trained once on
    ``pydoc_data.topics`` and cached), its RescorerLM and 4-gram; prompts from the held-out
    paragraphs long enough for a prompt and a continuation (the first ``--blockwise-prompts``
    for the benchmark, the rest for calibration), one task."""
    from benchmarks.common.real_model import PromptCase
    from blockdraft.demo.config import DemoConfig
    from blockdraft.demo.corpus import cache_key, cache_root, load_corpus
    from blockdraft.demo.prepare import prepare
    from blockdraft.models import load_model
    from blockdraft.rescorers.neural import NeuralPathScorer
    from blockdraft.training.ngram.train import arpa_counts

    config = DemoConfig()
    text = load_corpus(None, config, args.seed)
    cache = cache_root() / "demo" / cache_key(text.paragraphs, config, args.seed)
    cache.mkdir(parents=True, exist_ok=True)
    art = prepare(cache, text.train, text.held_out, config, args.seed, text.name, log, False)
    tok, prompt_len, max_new = art.tokenizer, 32, 64
    held = [[tok.eos_id, *ids[:prompt_len]] for ids in tok.encode_batch(text.held_out)
            if len(ids) >= prompt_len + 16]
    n = args.blockwise_prompts
    if len(held) - n < 8:
        raise SystemExit(f"--blockwise-prompts {n}: {len(held)} held-out paragraphs are long "
                         "enough; leave at least 8 of them for calibration")
    cases = [PromptCase("pydoc-heldout", f"p{i}", tuple(ids)) for i, ids in enumerate(held[:n])]
    rescorer = load_model(art.rescorer_dir).eval()
    lm_path = Path(art.lm.path)
    counts = arpa_counts(lm_path.with_suffix(".arpa"))
    lm_info = {"name": f"demo-{lm_path.stem}", "order": len(counts), "ngrams": int(sum(counts)),
               "counts": list(counts), "command": "blockdraft demo --blockwise (cached)"}
    fields = {"model": f"BlockwiseLM demo ({config.describe()})", "heads": "self-trained",
              "dtype": "float32", "tasks": "pydoc-heldout", "prompts_per_task": len(cases),
              "calibration": f"{len(held[n:])} other held-out paragraphs",
              "rescorer": f"RescorerLM({config.rescorer_n_layer}L,d{config.rescorer_d_model})"}
    online = list(enumerate(cases[:6]))
    return Setup(art.model, fields, cases, held[n:], online, tok.eos_id, max_new, lm_path,
                 lm_info, NeuralPathScorer(rescorer, max_depth=int(art.model.config.h)),
                 art.rescorer_dir)


def main(argv: list[str] | None = None) -> int:
    import torch

    from blockdraft.core.files import cache_dir
    from blockdraft.core.signature import environment
    from blockdraft.models.capabilities import capabilities_of
    from blockdraft.oracle import rank_accuracies
    from blockdraft.rescorers.ngram import NgramLM

    args = parse_args(argv)
    wall = time.perf_counter()
    torch.set_num_threads(args.threads)
    cache = cache_dir("bench", "trees")
    setup = blockwise_setup(args) if args.model == "blockwise" else smollm2_setup(args)
    model, cases = setup.model, setup.cases
    label = f"{setup.fields['model']}|{setup.fields['heads']}|{setup.fields['dtype']}"
    trace = cached_trace(model, [list(c.ids) for c in cases], "eval", label, setup.max_new,
                         args.k, setup.eos, cache)
    cal = cached_trace(model, setup.calibration, "calibration", label, setup.max_new, args.k,
                       setup.eos, cache)
    lm = NgramLM(setup.lm_path)
    lm.check_vocab(model.config.vocab_size, tokenizer=getattr(model, "tokenizer", None))
    accuracies = rank_accuracies(cal, args.k)
    make: dict[str, Any] = {"k": args.k, "lm": lm, "accuracies": accuracies, "alpha": 1.0,
                            "neural": setup.neural, "neural_dir": setup.neural_dir,
                            "conditional": capabilities_of(model).tree_lattice}
    budget = 32 if 32 in args.budgets else max(args.budgets)
    alphas, alpha_b = {}, {}
    for key in RESCORED:
        alphas[key], alpha_b[key] = choose_alpha(cal, key, budget, args.alphas, **make)
    make["alphas"] = alphas
    tasks = list(dict.fromkeys(c.task for c in cases))
    rows = simulate_builders(trace, cases, args.budgets, args.builders, model=model,
                             eos=setup.eos, **make)
    sizes = sorted({*args.budgets, model.h})  # the chain verifies at most h nodes
    costs = measure_costs(model, cases[0].ids, sizes, args.k, args.repeats)
    online = run_online(model, setup.online, rows, args.online_budgets, args.online_builders,
                        args.online_max_new, setup.eos, **make)
    fields = {
        **setup.fields, "threads": args.threads, "h": model.h, "k": args.k,
        "alpha": alphas["rescored-4gram"], "alpha_neural": alphas["rescored-neural"],
        "lm": f"{setup.lm_info['name']}({setup.lm_info['ngrams']})",
        "max_new_tokens": setup.max_new, "online_max_new_tokens": args.online_max_new,
        "criterion": "exact", "seed": args.seed, "torch": torch.__version__,
        **environment("cpu"),
    }
    command = ("python -m benchmarks.bench_trees " + shlex.join(args.argv)).strip()
    report = make_report(rows=rows, costs=costs, online=online, fields=fields, tasks=tasks,
                         command=command, accuracies=accuracies, alpha_b=alpha_b,
                         lm=setup.lm_info, wall_s=time.perf_counter() - wall)
    paths = write_report(report, args.out)
    print(markdown(report))
    log("wrote " + ", ".join(str(p) for p in paths))
    return 0 if all(r["identical"] for r in online) else 1


if __name__ == "__main__":
    raise SystemExit(main())
