"""Kim et al. (2024)'s tables on the real model: SmolLM2-135M-Instruct with its Medusa heads.

    .venv/bin/python -m benchmarks.bench_kim [--lm NAME=PATH ...] [--alpha 1.0] [--k 16] \\
        [--p 4,16] [--neural FOLDER] [--context-order N --context-weight W]     # make bench-kim

SmolLM2-135M-Instruct with its packaged Medusa heads (h = 6; ``--heads DIR`` for others) on
ONNX Runtime float32, one thread, exact criterion (lossless). Two prompt sets, each recorded
once as a trace (``blockdraft.oracle``: greedy decode, EOS honoured, ``--max-new-tokens`` 128,
every head's top ``--K`` 32) and cached under ``$BLOCKDRAFT_CACHE/bench/kim/<set>-<key>``, the
key a digest of the model, the heads' files, the prompts' token ids and the settings, so that a
rerun records nothing:

- ``chat``: the held-out chat set ``benchmarks/chat_eval.jsonl`` (36 requests; the kind of a
  request is its ``category``);
- ``tasks``: ``real_model.build_cases`` over ``tasks.REAL_TASKS`` (``benchmarks.common``),
  ``--per-task`` 2 prompts per task, the chat template, at most ``--prompt-tokens`` 400 (the
  kind is the task).

Everything else is simulated offline from the traces (docs/definitions.md sec. 6): vanilla
heads, p-best 0-gram, n-gram rescoring (1-best and p-best, p drafts verified as one trie) with
every ``--lm`` (a KenLM binary or ARPA over SmolLM2 token ids), neural rescoring with
``--neural`` (a RescorerLM folder), the context LM of ``NgramRescorer`` (``--context-order``,
``--context-weight``, passed only when its constructor takes them), and the oracle. Without
``--lm`` nothing is trained: the page reports vanilla, p-best 0-gram and the oracle, and says
which rows are missing. Tables (common/kim_report.py): Kim's Table 3 (consecutive repetition),
Table 4 (B), Table 5 (wins/ties/losses), Fig. 6 (the oracle curve, ``kim_oracle.png``) and the
latency of each rescorer per step at the shapes used (App. H), each per kind of request and
overall (pooled: tokens / calls of the set), the paper's figures beside ours.

Writes ``benchmarks/results/kim/kim.{md,json}`` and ``kim_oracle.png`` (``--out``), each with
the command and the signature of every setting that changes the numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.report import log

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "kim"
CHAT = BENCH / "chat_eval.jsonl"
MODEL = "smollm2"
RUNTIME, PRECISION = "onnxruntime", "float32"
ORACLE_KS = (1, 2, 4, 8, 16, 32)
KIM_VERSION = 1  # part of every trace's cache key: bump when what a trace holds changes


# ---- the prompt sets and their traces ------------------------------------------------------------


@dataclass(frozen=True)
class PromptSet:
    """One prompt set: its token ids, the kind of each request, and where it came from."""

    name: str
    prompts: tuple[tuple[int, ...], ...]
    kinds: tuple[str, ...]
    ids: tuple[str, ...]
    source: str  # what the set is, for the page and the signature

    def groups(self) -> dict[str, list[int]]:
        """``{kind: trace indices}`` in the order kinds first appear, then ``"all"``."""
        out: dict[str, list[int]] = {}
        for i, kind in enumerate(self.kinds):
            out.setdefault(kind, []).append(i)
        out["all"] = list(range(len(self.kinds)))
        return out


def chat_set(tokenizer: Any, path: Path = CHAT) -> PromptSet:
    """The held-out chat set, one user turn each in the model's chat template."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    prompts = tuple(tuple(int(t) for t in tokenizer.apply_chat_template(
        [{"role": "user", "content": r["prompt"]}])) for r in rows)
    return PromptSet("chat", prompts, tuple(r["category"] for r in rows),
                     tuple(f"chat-{i}" for i in range(len(rows))),
                     f"{path.name} ({len(rows)} requests, chat template)")


def task_set(tokenizer: Any, per_task: int, prompt_tokens: int, seed: int = 0) -> PromptSet:
    """``real_model.build_cases`` over ``tasks.REAL_TASKS`` (``benchmarks.common``)."""
    from benchmarks.common.real_model import build_cases
    from benchmarks.common.tasks import REAL_TASKS

    cases = build_cases(tokenizer, REAL_TASKS, per_task, prompt_tokens, seed)
    return PromptSet("tasks", tuple(tuple(c.ids) for c in cases), tuple(c.task for c in cases),
                     tuple(c.id for c in cases),
                     f"REAL_TASKS x {per_task} (seed {seed}, chat template, <= {prompt_tokens} "
                     "prompt tokens)")


def prompts_digest(pset: PromptSet) -> str:
    """SHA-256 (12 hex) of the set's token ids and kinds."""
    return hashlib.sha256(json.dumps([pset.prompts, pset.kinds]).encode()).hexdigest()[:12]


def trace_key(fields: dict[str, Any]) -> str:
    """The cache key of a trace: a digest of everything that changes what it holds."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def ensure_trace(pset: PromptSet, fields: dict[str, Any], cache: Path,
                 load_model: Callable[[], Any], eos_id: int | None
                 ) -> tuple[Any, dict[str, Any]]:
    """The set's trace from the cache, recorded once when missing: ``(trace, info)``.

    ``fields`` (model, heads, runtime, precision, threads, K, max_new_tokens, ...) and the
    prompts make the key; ``load_model`` is called only when the trace must be recorded.
    """
    from rich.progress import track

    from blockdraft.oracle import Trace
    from blockdraft.oracle.record import record_trace

    sig = {**fields, "set": pset.name, "prompts": prompts_digest(pset), "eos_id": eos_id,
           "kim_version": KIM_VERSION}
    key = trace_key(sig)
    path = cache / f"{pset.name}-{key}"
    info = {"path": str(path), "key": key, "from_cache": True, "record_s": 0.0}
    if (path / "meta.json").is_file():
        return Trace.open(path), info
    log(f"recording the {pset.name} trace ({len(pset.prompts)} prompts; once, cached at {path})")
    model = load_model()
    start = time.perf_counter()
    cache.mkdir(parents=True, exist_ok=True)
    trace = record_trace(model, pset.prompts, path, max_new_tokens=int(fields["max_new_tokens"]),
                         eos_id=eos_id, K=int(fields["K"]), signature=sig,
                         progress=lambda it: track(list(it), description=f"tracing {pset.name}"))
    info.update(from_cache=False, record_s=time.perf_counter() - start)
    return trace, info


# ---- strategies ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refiner:
    """One way to rank the lattice's paths (the rows of Kim's tables).

    Attributes:
        label: the row's name (``"4-gram textbooks"``, ``"... + context(n=4, w=0.3)"``).
        family: ``"ngram"`` or ``"neural"``.
        make: a fresh rescorer (each simulation gets its own: the context LM keeps state).
        pbest: also make the p-best rows (Kim's p-best n-gram BPD; neural is p = 1 only).
        info: what the page and the signature say about it (path, digest, order, ...).
    """

    label: str
    family: str
    make: Callable[[], Any]
    pbest: bool = True
    info: dict[str, Any] = field(default_factory=dict)


def context_kwargs(cls: Any, order: int | None, weight: float | None
                   ) -> tuple[dict[str, Any], str | None]:
    """The context-LM keyword arguments ``cls`` takes (``inspect.signature``), and why any
    requested one is dropped (None when nothing is)."""
    wanted = {k: v for k, v in (("context_order", order), ("context_weight", weight))
              if v is not None}
    if not wanted:
        return {}, None
    params = inspect.signature(cls).parameters
    taken = {k: v for k, v in wanted.items() if k in params}
    dropped = sorted(set(wanted) - set(taken))
    why = (f"{cls.__name__} does not take {', '.join(dropped)}: the context-LM rows are "
           "missing" if dropped else None)
    return (taken if not dropped else {}), why


def context_label(kwargs: dict[str, Any]) -> str:
    """``" + context(n=4, w=0.3)"`` for context-LM keyword arguments, else ``""``."""
    if not kwargs or not kwargs.get("context_weight"):
        return ""
    order = kwargs.get("context_order", "default")
    return f" + context(n={order}, w={kwargs['context_weight']:g})"


def build_refiners(lms: Sequence[tuple[str, Any, dict[str, Any]]], alpha: float,
                   ctx: dict[str, Any], neural: tuple[str, Path, dict[str, Any]] | None = None
                   ) -> list[Refiner]:
    """The n-gram refiners (``lms``: ``(name, NgramLM, info)``; with ``ctx`` each LM also with
    the context LM) and the neural one (``(name, folder, info)``)."""
    from blockdraft.rescorers.ngram import NgramRescorer

    out = []
    for name, lm, info in lms:
        label = f"{lm.order}-gram {name}"
        out.append(Refiner(label, "ngram", partial(NgramRescorer, lm, alpha=alpha), info=info))
        if ctx.get("context_weight"):
            out.append(Refiner(label + context_label(ctx), "ngram",
                               partial(NgramRescorer, lm, alpha=alpha, **ctx),
                               info={**info, **ctx}))
    if neural is not None:
        name, folder, info = neural

        def make_neural(folder: Path = folder) -> Any:
            from blockdraft.rescorers.neural import NeuralRescorer

            return NeuralRescorer(folder, alpha=alpha, backend="onnx")

        out.append(Refiner(f"neural {name}", "neural", make_neural, pbest=False, info=info))
    return out


def pbest_label(p: int, refiner: Refiner | None) -> str:
    return f"{p}-best {'0-gram' if refiner is None else refiner.label}"


def oracle_label(k: int) -> str:
    return f"oracle k={k}"


# ---- the analyses of one set ---------------------------------------------------------------------


def subset_steps(steps: Any, mask: np.ndarray) -> Any:
    """The rows of a ``StepRecords`` where ``mask`` holds (every per-step array it has)."""
    return type(steps)(**{f.name: getattr(steps, f.name)[mask]
                          if isinstance(getattr(steps, f.name), np.ndarray)
                          else getattr(steps, f.name) for f in fields(steps)})


def subset(result: Any, examples: Sequence[int]) -> Any:
    """A ``SimulationResult`` restricted to ``examples`` (what simulating only them gives:
    every example's walk is independent of the others)."""
    keep = np.isin(result.examples, examples)
    mis = np.isin(result.mismatch_example, examples)
    return replace(result, examples=result.examples[keep], generated=result.generated[keep],
                   calls=result.calls[keep],
                   steps=subset_steps(result.steps, np.isin(result.steps.example, examples)),
                   mismatch_example=result.mismatch_example[mis],
                   mismatch_t=result.mismatch_t[mis])


def analyse_set(trace: Any, groups: dict[str, list[int]], refiners: Sequence[Refiner], *,
                k: int, ps: Sequence[int], oracle_ks: Sequence[int] = ORACLE_KS,
                progress: Any = None) -> dict[str, Any]:
    """Kim's Tables 3, 4, 5 and Fig. 6 for one trace, per group of examples (a kind of request,
    and ``"all"``).

    Every strategy is simulated once over the whole trace and split by group (an example's
    walk depends on nothing else). Rows: vanilla; each refiner's 1-best (Tables 3, 4, 5); the
    p-best of head scores (0-gram) and of each n-gram refiner as one trie per step (Table 4);
    the oracle at ``oracle_ks`` (Fig. 6; Table 4 shows ``k``).

    Args:
        trace: the set's trace.
        groups: ``{name: trace indices}`` (sorted indices).
        refiners: the rescorers (see :func:`build_refiners`).
        k: lattice width of the rescorers and the p-best drafts.
        ps: the p of the p-best rows.
        oracle_ks: lattice widths of the oracle curve (those above the trace's K dropped).
        progress: ``(description) -> None`` called before each simulation, or None.

    Returns:
        JSON-ready ``{"B", "repetition", "wtl", "oracle", "steps", "mismatches"}``, each keyed
        by strategy and group (``oracle`` by group).
    """
    from blockdraft.drafts import DraftSpec
    from blockdraft.oracle import (
        compare_steps,
        oracle_curve,
        repetition,
        simulate,
        simulate_at_positions,
    )

    def tick(what: str) -> None:
        if progress is not None:
            progress(what)

    def heads(p: int, refiner: Refiner | None = None) -> DraftSpec:
        """The heads' p best (one trie), ranked by a fresh rescorer of ``refiner``: an object
        this harness built (its n-gram LMs checked against the tokenizer, its neural LM on ONNX
        Runtime, which no spec names by file), so the spec is given it."""
        if refiner is None:
            return DraftSpec("heads", k=k, p=p)  # p = 1: vanilla (the spec reads k = 1)
        return DraftSpec("heads", k=k, p=p, rescorer="given", given=refiner.make())

    def sim(strategy: Any, label: str) -> Any:
        tick(label)
        return simulate(trace, strategy)

    B: dict[str, dict[str, float]] = {}
    rep: dict[str, dict[str, Any]] = {}
    wtl: dict[str, dict[str, Any]] = {}
    steps: dict[str, int] = {}

    def record(label: str, res: Any, with_repetition: bool) -> None:
        B[label] = {g: subset(res, idx).block_efficiency for g, idx in groups.items()}
        steps[label] = len(res.steps)
        if with_repetition:
            rep[label] = {g: repetition(subset(res, idx)).to_dict() for g, idx in groups.items()}

    vanilla = sim(heads(1), "vanilla")
    record("vanilla", vanilla, True)
    for r in refiners:
        res = sim(heads(1, r), r.label)
        record(r.label, res, True)
        tick(f"{r.label} at vanilla's positions")
        other = simulate_at_positions(trace, heads(1, r), vanilla.steps.example,
                                      vanilla.steps.t)
        wtl[r.label] = {}
        for g, idx in groups.items():
            mask = np.isin(vanilla.steps.example, idx)
            wtl[r.label][g] = compare_steps(subset_steps(vanilla.steps, mask),
                                            subset_steps(other, mask), strategy=r.label,
                                            baseline_name="vanilla").to_dict()
    for p in ps:
        for ref in [None, *[r for r in refiners if r.pbest]]:
            label = pbest_label(p, ref)
            record(label, sim(heads(p, ref), label), False)
    oracle: dict[str, Any] = {}
    for g, idx in groups.items():
        tick(f"oracle curve ({g})")
        curve = oracle_curve(trace, oracle_ks, examples=idx, vanilla=subset(vanilla, idx))
        oracle[g] = {"ks": curve.ks.tolist(), "b_oracle": curve.b_oracle.tolist(),
                     "ratio": curve.ratio.tolist(), "b_vanilla": curve.b_vanilla}
        if k in curve.ks:
            B.setdefault(oracle_label(k), {})[g] = float(curve.b_oracle[list(curve.ks).index(k)])
    return {"B": B, "repetition": rep, "wtl": wtl, "oracle": oracle, "steps": steps,
            "mismatches": int(vanilla.num_mismatches)}


def describe_set(trace: Any, pset: PromptSet) -> dict[str, Any]:
    """Prompts and generated tokens per kind (and ``all``), how many answers hit EOS."""
    out: dict[str, Any] = {}
    for g, idx in pset.groups().items():
        out[g] = {"prompts": len(idx), "tokens": int(sum(trace[i].m for i in idx)),
                  "prompt_tokens": int(sum(len(pset.prompts[i]) for i in idx))}
    return out


# ---- latency (App. H) ----------------------------------------------------------------------------


class HeadScores:
    """The rescorer of head scores alone: the lattice's ``p`` best paths (p-best 0-gram; at
    ``k = p = 1`` vanilla's argmax)."""

    def rescore(self, lattice: Any, context: Any = (), p: int = 1) -> Any:
        return lattice.best_paths(p)


def trace_source(traces: Sequence[Any]) -> Callable[[np.random.Generator, int, int], Any]:
    """Lattices and contexts at uniformly drawn positions of the traces (a
    :data:`blockdraft.rescorers.latency.LatticeSource`)."""
    from blockdraft.lattice import SausageLattice

    sizes = np.array([t.num_positions for t in traces], dtype=np.float64)

    def make(rng: np.random.Generator, h: int, k: int) -> tuple[Any, np.ndarray]:
        tr = traces[int(rng.choice(len(traces), p=sizes / sizes.sum()))]
        e = int(rng.integers(tr.num_examples))
        ex = tr[e]
        t = int(rng.integers(ex.m))
        lat = ex.lattice(t, k)
        return SausageLattice(tokens=lat.tokens[:h], scores=lat.scores[:h]), ex.context(t)

    return make


def machine_load() -> dict[str, Any]:
    """The 1-minute load average and the cores (busy: another job beside this one, a load
    above 1.5: this process alone keeps one core, a load of about 1)."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"load1": load, "cores": cores, "busy": bool(load > 1.5)}


def measure_latency(traces: Sequence[Any], refiners: Sequence[Refiner], *, k: int,
                    ps: Sequence[int], n: int, seed: int = 0, progress: Any = None
                    ) -> dict[str, Any]:
    """Median ms of one step's drafting by each strategy at the shapes the tables use (``h``
    x ``k`` lattices, ``p`` drafts): vanilla's argmax, p-best 0-gram, every n-gram refiner
    (``bench_rescore`` on the same ``n`` lattices drawn from the traces) and the neural
    refiner (``time_step``: a decode step's call with two new context tokens, on ``n // 10``
    of those positions, the median of their medians).

    Returns:
        ``{"rows": [...], "load_before", "load_after", "n"}``.
    """
    from blockdraft.rescorers.latency import bench_rescore
    from blockdraft.rescorers.neural import time_step

    h = int(traces[0].h)
    source = trace_source(traces)
    every_p = sorted({1, *ps})
    jobs: list[tuple[str, Any, int, list[int], str]] = [
        ("vanilla (argmax)", HeadScores(), 1, [1], "-"),
        ("0-gram (head scores)", HeadScores(), k, every_p, "-"),
    ]
    jobs += [(r.label, r.make(), k, every_p if r.pbest else [1], r.family)
             for r in refiners if r.family == "ngram"]
    before = machine_load()
    rows: list[dict[str, Any]] = []
    for label, rescorer, kk, pp, family in jobs:
        if progress is not None:
            progress(f"latency: {label}")
        for row in bench_rescore({label: rescorer}, source, kind="trace", hs=[h], ks=[kk],
                                 ps=pp, n=n, seed=seed, reference=None):
            rows.append({"strategy": label, "family": family, "shape": f"{h}x{kk}", "p": row.p,
                         "median_ms": row.median_ms, "p90_ms": row.p90_ms, "n": row.n})
    for r in refiners:
        if r.family != "neural":
            continue
        if progress is not None:
            progress(f"latency: {r.label}")
        rng = np.random.default_rng([seed, h, k, 1])
        positions = [source(rng, h, k) for _ in range(max(3, n // 10))]
        rescorer = r.make()
        times = [time_step(rescorer, lat, ctx, repeats=5, p=1, new_tokens=2)
                 for lat, ctx in positions]
        rows.append({"strategy": r.label, "family": "neural", "shape": f"{h}x{k}", "p": 1,
                     "median_ms": float(np.median(times)),
                     "p90_ms": float(np.percentile(times, 90)), "n": len(times)})
    return {"rows": rows, "load_before": before, "load_after": machine_load(), "n": n}


# ---- the report ----------------------------------------------------------------------------------


def make_report(command: str, fields: dict[str, Any], settings: dict[str, Any],
                missing: Sequence[str], sets: dict[str, Any], latency: dict[str, Any] | None,
                wall_s: float) -> dict[str, Any]:
    """The JSON-ready report that ``kim_report.write_page`` renders: the command, the signature
    (``fields`` in order), the settings, the missing rows, per set the :func:`analyse_set`
    results with the set's sizes and trace, and the latency table."""
    from blockdraft.core.signature import cpu_flags, format_signature

    return {"command": command, "signature": format_signature(fields), "fields": dict(fields),
            "cpu_flags": list(cpu_flags()), "settings": dict(settings), "missing": list(missing),
            "sets": dict(sets), "latency": latency, "wall_s": wall_s}


# ---- command line --------------------------------------------------------------------------------


@dataclass
class Args:
    """The parsed command line."""

    lms: list[tuple[str, Path]]
    alpha: float
    k: int
    ps: list[int]
    neural: Path | None
    context_order: int | None
    context_weight: float | None
    heads: str
    K: int
    max_new_tokens: int
    per_task: int
    prompt_tokens: int
    seed: int
    sets: list[str]
    threads: int
    latency_n: int
    out: Path
    argv: list[str] = field(default_factory=list)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from e
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _lm_spec(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--lm takes NAME=PATH, got {text!r}")
    if not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"--lm {name}: no file at {path}")
    return name, Path(path)


def parse_args(argv: list[str] | None = None) -> Args:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--lm", action="append", type=_lm_spec, default=[], metavar="NAME=PATH",
                    help="an n-gram LM over SmolLM2 token ids (KenLM binary or ARPA); repeatable")
    ap.add_argument("--alpha", type=float, default=1.0, help="LM weight of every rescorer")
    ap.add_argument("--k", type=int, default=16, help="lattice width of rescoring and p-best")
    ap.add_argument("--p", type=_int_list, default=[4, 16], help="p of the p-best rows (4,16)")
    ap.add_argument("--neural", type=Path, default=None, help="a RescorerLM folder")
    ap.add_argument("--context-order", type=int, default=None,
                    help="NgramRescorer's context LM order (only if it takes context_order)")
    ap.add_argument("--context-weight", type=float, default=None,
                    help="NgramRescorer's context LM weight (adds '+ context' rows per LM)")
    ap.add_argument("--heads", default=MODEL, help="smollm2 (the packaged heads) or a folder")
    ap.add_argument("--K", type=int, default=32, help="top-K kept per head in the traces")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--per-task", type=int, default=2, help="prompts per task (tasks set)")
    ap.add_argument("--prompt-tokens", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0, help="which prompts of each task")
    ap.add_argument("--sets", default="chat,tasks", help="comma-separated of chat, tasks")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime / torch threads")
    ap.add_argument("--latency-n", type=int, default=200,
                    help="lattices per latency cell (0: no latency table)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    sets = [s for s in a.sets.split(",") if s]
    if not sets or set(sets) - {"chat", "tasks"}:
        ap.error("--sets: a comma-separated list of chat, tasks")
    for name in ("k", "K", "max_new_tokens", "per_task", "prompt_tokens", "threads"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.k > a.K:
        ap.error(f"--k {a.k} exceeds the traces' --K {a.K}")
    if a.alpha < 0 or not np.isfinite(a.alpha):
        ap.error("--alpha must be a finite number >= 0")
    names = [n for n, _ in a.lm]
    if len(set(names)) != len(names):
        ap.error("--lm: every LM needs its own NAME")
    if a.neural is not None and not (a.neural / "config.json").is_file():
        ap.error(f"--neural {a.neural}: no RescorerLM folder there (config.json missing)")
    return Args(lms=list(a.lm), alpha=a.alpha, k=a.k, ps=a.p, neural=a.neural,
                context_order=a.context_order, context_weight=a.context_weight, heads=a.heads,
                K=a.K, max_new_tokens=a.max_new_tokens, per_task=a.per_task,
                prompt_tokens=a.prompt_tokens, seed=a.seed, sets=sets, threads=a.threads,
                latency_n=max(0, a.latency_n), out=a.out,
                argv=list(sys.argv[1:] if argv is None else argv))


def folder_digest(folder: Path) -> str:
    """SHA-256 (10 hex) over a folder's files (names and bytes), for the signature."""
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file() and f.suffix != ".onnx":  # an export beside the weights is derived
            h.update(f.relative_to(folder).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:10]


def load_lms(specs: Sequence[tuple[str, Path]], vocab_size: int, tokenizer: Any
             ) -> list[tuple[str, Any, dict[str, Any]]]:
    """Each ``--lm``: ``(name, NgramLM, info)``, its vocabulary checked against the model's."""
    from blockdraft.core.digest import sha256_file
    from blockdraft.rescorers.ngram import NgramLM

    out = []
    for name, path in specs:
        lm = NgramLM(path)
        lm.check_vocab(vocab_size, tokenizer=tokenizer)
        out.append((name, lm, {"name": name, "path": str(path), "order": lm.order,
                               "sha256": sha256_file(path)[:12]}))
    return out


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchmarks.common.kim_report import write_page
    from blockdraft.core.files import cache_dir
    from blockdraft.core.signature import environment
    from blockdraft.models import load_tokenizer
    from blockdraft.rescorers.ngram import NgramRescorer

    args = parse_args(argv)
    wall = time.perf_counter()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    from benchmarks.common.real_model import heads_label

    tok = load_tokenizer(MODEL)
    heads = heads_label(args.heads)
    sets = {"chat": lambda: chat_set(tok),
            "tasks": lambda: task_set(tok, args.per_task, args.prompt_tokens, args.seed)}
    psets = [sets[name]() for name in args.sets]

    model_box: list[Any] = []

    def load() -> Any:
        if not model_box:
            import torch

            from blockdraft.models import load_model

            torch.set_num_threads(args.threads)
            log(f"loading {MODEL} ({RUNTIME} {PRECISION}, heads {heads}, {args.threads} "
                "thread(s); a first ONNX export takes minutes, then it is cached)")
            model_box.append(load_model(MODEL, heads=None if args.heads == MODEL else args.heads,
                                        runtime=RUNTIME, precision=PRECISION,
                                        threads=args.threads))
        return model_box[0]

    trace_fields = {"model": MODEL, "heads": heads, "runtime": RUNTIME, "precision": PRECISION,
                    "threads": args.threads, "K": args.K, "max_new_tokens": args.max_new_tokens,
                    "criterion": "exact"}
    cache = cache_dir("bench", "kim")
    traces, trace_info = {}, {}
    for pset in psets:
        traces[pset.name], trace_info[pset.name] = ensure_trace(pset, trace_fields, cache, load,
                                                                tok.eos_id)
    h = int(next(iter(traces.values())).h)

    missing: list[str] = []
    lms = load_lms(args.lms, int(next(iter(traces.values())).V), tok)
    ctx, why = context_kwargs(NgramRescorer, args.context_order, args.context_weight)
    if why:
        missing.append(why)
    if args.context_weight and not lms:
        missing.append("context-LM rows: the context LM rides on an --lm, and none was given")
    neural = None
    if args.neural is not None:
        neural = (args.neural.name, args.neural,
                  {"name": args.neural.name, "path": str(args.neural),
                   "sha256": folder_digest(args.neural)})
    refiners = build_refiners(lms, args.alpha, ctx, neural)
    if not lms:
        missing.append("n-gram rows (Table 3's rescored drafts, Table 4's n-gram 1-best and "
                       "p-best, Table 5, their latency): no --lm was given, and this harness "
                       "trains none")
    if neural is None:
        missing.append("neural rows: no --neural RescorerLM folder was given")

    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    per_set = 1 + 2 * len(refiners) + len(args.ps) * (1 + sum(r.pbest for r in refiners))
    results: dict[str, Any] = {}
    with Progress(*columns, console=console) as bar:
        for pset in psets:
            groups = pset.groups()
            job = bar.add_task(pset.name, total=per_set + len(groups))
            started = [0]

            def tick(what: str, job: Any = job, name: str = pset.name,
                     started: list[int] = started) -> None:
                bar.update(job, completed=started[0], description=f"{name}: {what}")
                started[0] += 1  # this simulation is under way; the previous ones are done

            res = analyse_set(traces[pset.name], groups, refiners, k=args.k, ps=args.ps,
                              progress=tick)
            bar.update(job, completed=per_set + len(groups), description=f"{pset.name}: done")
            results[pset.name] = {"source": pset.source, "kinds": list(groups)[:-1],
                                  "sizes": describe_set(traces[pset.name], pset),
                                  "trace": trace_info[pset.name], **res}
        latency = None
        if args.latency_n:
            job = bar.add_task("latency", total=None)
            latency = measure_latency(list(traces.values()), refiners, k=args.k, ps=args.ps,
                                      n=args.latency_n,
                                      progress=lambda what: bar.update(job, description=what))
            bar.update(job, description="latency: done", total=1, completed=1)

    env = environment("cpu")
    fields: dict[str, Any] = {
        "model": f"{MODEL}(SmolLM2-135M-Instruct)", "heads": heads, "runtime": RUNTIME,
        "precision": PRECISION, "threads": args.threads, "h": h, "K": args.K, "k": args.k,
        "p": ",".join(map(str, args.ps)), "alpha": args.alpha,
        "lms": "+".join(f"{i['name']}:{i['order']}gram@{i['sha256']}" for _, _, i in lms) or "none",
        "neural": f"{neural[0]}@{neural[2]['sha256']}" if neural else "none",
        "context": (f"order={ctx.get('context_order', 'default')},weight={ctx['context_weight']}"
                    if ctx.get("context_weight") else "none"),
        "sets": "+".join(f"{p.name}@{prompts_digest(p)}" for p in psets),
        "per_task": args.per_task, "prompt_tokens": args.prompt_tokens, "seed": args.seed,
        "max_new_tokens": args.max_new_tokens, "eos": "honoured", "criterion": "exact", **env,
    }
    settings = {"k": args.k, "ps": args.ps, "alpha": args.alpha, "oracle_ks": list(ORACLE_KS),
                "lms": [i for _, _, i in lms], "neural": neural[2] if neural else None,
                "context": ctx, "refiners": [r.label for r in refiners]}
    command = " ".join(["python -m benchmarks.bench_kim", shlex.join(args.argv)]).strip()
    report = make_report(command, fields,
                         settings, missing, results, latency, time.perf_counter() - wall)
    paths = write_page(report, args.out)
    log("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
