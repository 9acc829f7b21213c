"""The analyses of Kim et al. (2024) on real data with our own models (issue 4).

    .venv/bin/python -m benchmarks.bench_eval            # make bench        (full)
    .venv/bin/python -m benchmarks.bench_eval --quick    # make bench-quick  (fewer examples)

What it does, in order (every artefact cached under $BLOCKDRAFT_CACHE/bench, default
~/.cache/blockdraft/bench):

1. Models, trained on the pretraining corpus only (OpenStax, Shakespeare, WikiText-2 valid) when
   missing, with the `blockdraft` commands written to models.json (seeds, wall time, held-out
   losses): the `small` BlockwiseLM (9 heads, base then heads: the 8 extra heads are trained on
   the frozen base, independently of each other, so its first 3 or 6 heads ARE a 3- or 6-head
   model; the h = 3, 6 ablation reads them from the 9-head trace), two RescorerLMs (mini:
   1 layer d=128; small: 2 layers d=256) and 2-gram / 4-gram KenLM models (lmplz).
2. Per task (LAMBADA, WikiText-2 test, llm_decoding wikitext/book prefixes, SQuAD, CNN/DM,
   SAMSum, XSum, MultiNews; prompts as in Kim App. C, see benchmarks/common/tasks.py): one trace
   of greedy decoding (trace once), then every drafting strategy simulated offline with exact
   verification: vanilla (h = 3, 6, 9), 2-/4-gram rescoring, neural rescoring (two sizes),
   p-best 0-gram and 4-gram for p = 1..16, the oracle for k = 1..16, repetition, head entropy,
   wins/ties/losses, and alpha tuned on the first n_tune examples, reported on the rest. Tasks
   run in two worker processes (one thread each).
3. Rescoring latency on real lattices from the traces: p-best latency vs p and 1-best latency vs
   lattice size, exact (native KenLM search) and WFST (pynini) backends (Kim Tables 12, 13).
4. End to end: online `decode` against plain greedy decoding on a few prompts per task type,
   wall-clock speedup per strategy with the time split, and losslessness checked token by
   token.

Writes benchmarks/results/eval.{md,json} and eval_*.png (quick: benchmarks/results/quick/).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.report import log

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BLOCKDRAFT_SHARED_DATA", REPO.parent / "shared" / "data"))
CACHE = Path(os.environ.get("BLOCKDRAFT_CACHE", Path.home() / ".cache" / "blockdraft")) / "bench"
MODELS = CACHE / "models"
RESULTS = REPO / "benchmarks" / "results"
EVAL_VERSION = 1  # part of every cache key of this script's traces

# Kim App. E / docs/definitions.md sec. 4
ALPHAS = (0.1, 0.5, 0.75, 0.9, 1.0, 1.1, 1.5, 2.0, 5.0, 10.0)
PS = (1, 2, 4, 8, 16)
ORACLE_KS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class EvalConfig:
    """Settings that change the numbers (all of them go into the signatures)."""

    tasks: tuple[str, ...]
    n_tune: int  # examples per task for tuning alpha (the first of the seeded order)
    n_eval: int  # examples per task the tables report (the next ones)
    max_new_tokens: int = 64  # greedy continuation per prompt
    K: int = 16  # top-K stored per head in the traces
    k: int = 16  # lattice width of the rescorers
    seed: int = 0  # example order
    latency_n: int = 200  # lattices per latency cell
    e2e_prompts: int = 4  # prompts per task in the end-to-end timing
    e2e_tasks: tuple[str, ...] = ("llm-wikitext", "squad", "cnndm")
    workers: int = 2
    alphas: tuple[float, ...] = ALPHAS
    tune: tuple[str, ...] = ("4-gram", "neural-mini")  # rescorers whose alpha is tuned
    smoke: bool = False  # tiny models on a tiny corpus: checks the harness, not the numbers
    # Greedy decoding stops at end-of-text, or (False) EOS is an ordinary token and every
    # continuation is max_new_tokens long. Our models are pretrained on one paragraph per line,
    # so they end most continuations within a few tokens, and SQuAD / SAMSum prompts (which end
    # a paragraph) at once: the benchmark generates a fixed length, EOS included, so every task
    # has the same number of positions (text after an EOS is the model's next "document").
    stop_at_eos: bool = False


FULL_TASKS = ("lambada", "wikitext2", "llm-wikitext", "llm-book", "squad", "cnndm", "samsum",
              "xsum", "multinews")
PRESETS = {
    "full": EvalConfig(tasks=FULL_TASKS, n_tune=100, n_eval=100),
    "quick": EvalConfig(tasks=FULL_TASKS, n_tune=6, n_eval=10, latency_n=30, e2e_prompts=1),
    "smoke": EvalConfig(tasks=("llm-wikitext", "squad"), n_tune=2, n_eval=3, max_new_tokens=16,
                        latency_n=4, e2e_prompts=1, e2e_tasks=("squad",), alphas=(0.5, 1.0),
                        smoke=True),
}


# ---------------------------------------------------------------------------- models
def pretrain_files() -> list[Path]:
    """The pretraining corpus, in a fixed order (never evaluation text)."""
    c = SHARED / "corpus"
    if not c.is_dir():
        raise SystemExit(f"benchmark data not found at {SHARED}; set BLOCKDRAFT_SHARED_DATA")
    return (sorted((c / "openstax").glob("*.txt")) + sorted((c / "more" / "openstax").glob("*.txt"))
            + [c / "tinyshakespeare" / "input.txt", c / "wikitext2_tokens" / "valid.txt"])


def model_commands(smoke: bool = False) -> dict[str, list[str]]:
    """The `blockdraft` command that builds each cached model (exactly what runs).

    ``smoke``: tiny sizes on Shakespeare alone, seconds to train (checks the harness only).
    """
    corpus = [str(p) for p in pretrain_files()]
    small = str(MODELS / "small-h9")
    size = ["--preset", "small"]
    steps = "600"
    if smoke:
        corpus = corpus[-2:-1]
        size = ["--preset", "tiny", "--h", "9", "--vocab-size", "512", "--steps", "30"]
        steps = "20"
    rescorer = ["train", "--rescorer", "--tokenizer", small, "--preset", "small",
                "--steps", steps, "--seed", "0", "--threads", "2", "--corpus", *corpus]
    return {
        "small-h9": ["train", *size, "-o", small, "--seed", "0", "--threads", "2",
                     "--corpus", *corpus],
        "rescorer-mini": [*rescorer, "-o", str(MODELS / "rescorer-mini"), "--n-layer", "1",
                          "--n-head", "2", "--d-model", "128", "--d-ff", "512"],
        "rescorer-small": [*rescorer, "-o", str(MODELS / "rescorer-small"), "--n-layer", "2",
                           "--n-head", "4", "--d-model", "256", "--d-ff", "1024"],
        "lm2": ["ngram", "train", "--text", *corpus, "--tokenizer", small, "--order", "2",
                "-o", str(MODELS / "lm2")],
        "lm4": ["ngram", "train", "--text", *corpus, "--tokenizer", small, "--order", "4",
                "-o", str(MODELS / "lm4")],
    }


def _built(name: str) -> bool:
    """The model's files exist and, for a trained network, its training reached the end."""
    if name.startswith("lm"):
        return (MODELS / f"{name}.bin").is_file() and (MODELS / f"{name}.arpa").is_file()
    d = MODELS / name
    if not (d / "model.safetensors").is_file():
        return False
    if not (d / "train_state.json").is_file():
        return True
    try:
        state = json.loads((d / "train_state.json").read_text())
        return int(state["step"]) >= int(state["train_config"]["steps"])
    except (OSError, ValueError, KeyError):
        return False


def ensure_models(smoke: bool = False, only: set[str] | None = None) -> dict[str, Any]:
    """Train what is missing (commands in order; ``only``: just those models); returns the
    manifest (models.json)."""
    MODELS.mkdir(parents=True, exist_ok=True)
    manifest_path = MODELS / "models.json"
    manifest: dict[str, Any] = (json.loads(manifest_path.read_text())
                                if manifest_path.is_file() else {})
    exe = str(Path(sys.executable).with_name("blockdraft"))
    for name, args in model_commands(smoke).items():
        if (only is not None and name not in only) or (_built(name) and name in manifest):
            continue
        if not _built(name):
            log(f"training {name}: blockdraft {' '.join(args[:8])} ...")
            t0 = time.perf_counter()
            flags = ["--resume"] if (MODELS / name / "train_state.json").is_file() else []
            if args[0] == "ngram":  # an LM not built whole (one of its files there) is replaced
                flags = ["--overwrite"]
            subprocess.run([exe, *args, *flags], check=True)
            wall = time.perf_counter() - t0
        else:
            wall = None  # trained before this manifest existed: see its log
        manifest = (json.loads(manifest_path.read_text())  # another run may have written it
                    if manifest_path.is_file() else {})
        manifest[name] = {"command": "blockdraft " + " ".join(args), "wall_s": wall,
                          **_model_facts(name)}
        manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _model_facts(name: str) -> dict[str, Any]:
    if name.startswith("lm"):
        with open(MODELS / f"{name}.arpa", encoding="utf-8") as f:
            counts = [int(line.split("=")[1]) for line in f.read(4096).splitlines()
                      if line.startswith("ngram ")]
        return {"ngrams": sum(counts), "counts": counts}
    meta = json.loads((MODELS / name / "config.json").read_text())
    return {"config": meta.get("config", meta), "train": meta.get("meta", {}).get("train"),
            "fingerprint": file_digest(MODELS / name / "model.safetensors")}


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:10]


# ---------------------------------------------------------------------------- per task
def signature(cfg: EvalConfig, manifest: dict[str, Any], **fields: Any) -> str:
    from blockdraft.core.signature import environment, format_signature

    fp = {name: m.get("fingerprint", m.get("ngrams")) for name, m in manifest.items()}
    return format_signature({
        "model": f"small-h9@{fp.get('small-h9')}",
        "rescorers": f"mini@{fp.get('rescorer-mini')},small@{fp.get('rescorer-small')}",
        "lms": f"lm2:{fp.get('lm2')}ngrams,lm4:{fp.get('lm4')}ngrams",
        "data": "shared/data", **fields, "max_new": cfg.max_new_tokens,
        "eos_stop": cfg.stop_at_eos, "seed": cfg.seed, **environment()})


def trace_task(task: str, cfg: EvalConfig, model: Any, tok: Any) -> tuple[Any, dict[str, Any]]:
    """The task's trace (cached): n_tune + n_eval prompts, greedy-decoded once."""
    from benchmarks.common.tasks import encode_prompt, load_task
    from blockdraft.oracle import Trace
    from blockdraft.oracle.record import record_trace

    n = cfg.n_tune + cfg.n_eval
    budget = model.config.max_seq_len - cfg.max_new_tokens  # prompt + continuation fit
    fp = file_digest(MODELS / "small-h9" / "model.safetensors")
    key = hashlib.sha256(json.dumps([EVAL_VERSION, task, n, cfg.seed, cfg.max_new_tokens,
                                     cfg.stop_at_eos, cfg.K,
                                     budget, fp]).encode()).hexdigest()[:10]
    path = CACHE / "traces" / f"{task}-n{n}-{key}"
    examples = load_task(task, SHARED, n=n, seed=cfg.seed)
    prompts = [encode_prompt(e, tok, budget, bos_id=tok.eos_id) for e in examples]
    info = {"examples": n, "prompt_budget": budget, "trace_path": str(path),
            "truncated": sum(p.truncated for p in prompts),
            "prompt_tokens_mean": float(np.mean([len(p.ids) for p in prompts])), "trace_s": 0.0}
    if not (path / "meta.json").is_file():
        t0 = time.perf_counter()
        record_trace(model, [p.ids for p in prompts], path, max_new_tokens=cfg.max_new_tokens,
                     eos_id=tok.eos_id if cfg.stop_at_eos else None, K=cfg.K, overwrite=True,
                     signature={"model": f"small-h9:{fp}", "task": task, "n": n,
                                "seed": cfg.seed, "prompt_budget": budget})
        info["trace_s"] = time.perf_counter() - t0
    return Trace.open(path), info


def evaluate_task(task: str, cfg: EvalConfig, models_dir: str) -> dict[str, Any]:
    """Every offline analysis of one task (runs in a worker process, a fresh interpreter:
    forking a parent that already ran torch / ONNX Runtime thread pools can deadlock)."""
    import torch

    global MODELS
    MODELS = Path(models_dir)

    torch.set_num_threads(1)
    from blockdraft.core.signature import environment
    from blockdraft.drafts import DraftSpec
    from blockdraft.models import load_model, load_tokenizer
    from blockdraft.oracle import (
        head_entropy,
        oracle_curve,
        repetition,
        simulate,
        wins_ties_losses,
    )
    from blockdraft.rescorers.neural import NeuralRescorer

    t_task = time.perf_counter()
    model = load_model(MODELS / "small-h9").eval()
    tok = load_tokenizer(MODELS / "small-h9")
    trace, info = trace_task(task, cfg, model, tok)
    settings = {k: v for k, v in asdict(cfg).items()
                if k not in ("tasks", "latency_n", "e2e_prompts", "e2e_tasks", "workers")}
    deps: list[str | int] = [file_digest(MODELS / f"rescorer-{s}" / "model.safetensors")
                             for s in ("mini", "small")]
    deps += [os.path.getsize(MODELS / f"lm{o}.bin") for o in (2, 4)]
    rkey = hashlib.sha256(json.dumps([EVAL_VERSION, Path(info["trace_path"]).name, settings,
                                      deps]).encode()).hexdigest()[:10]
    cached = CACHE / "results" / f"{task}-{rkey}.json"
    if cached.is_file():
        log(f"{task}: results cached ({cached.name})")
        # The key covers the trace, the settings and the models, not the code: the report
        # says which tasks came from here and the commit that computed them.
        return {**json.loads(cached.read_text()), "from_cache": True}
    log(f"{task}: trace ready ({trace.num_examples} examples, {trace.num_positions} positions, "
        f"{info['trace_s']:.0f} s)")
    tune = slice(0, cfg.n_tune)
    ev = slice(cfg.n_tune, cfg.n_tune + cfg.n_eval)
    def heads(p: int = 1, name: str = "", alpha: float = 1.0) -> DraftSpec:
        """The heads' p best of the top-k lattice (vanilla at p = 1 without a rescorer),
        ranked by the rescorer ``name`` (``"4-gram"``: the file ``lm4.bin``; ``"neural-mini"``:
        a RescorerLM on ONNX Runtime, which no spec names by file: given as an object)."""
        if not name:
            return DraftSpec("heads", k=cfg.k, p=p)
        if name.endswith("gram"):
            return DraftSpec("heads", k=cfg.k, p=p, rescorer="ngram",
                             lm=str(MODELS / f"lm{name[0]}.bin"), alpha=alpha)
        neural = NeuralRescorer(MODELS / f"rescorer-{name.split('-')[1]}", alpha=alpha,
                                backend="onnx")
        return DraftSpec("heads", k=cfg.k, p=p, rescorer="given", given=neural, alpha=alpha)

    timings: dict[str, float] = {}

    def run(name: str, strategy: Any, examples: slice = ev, tr: Any = trace) -> Any:
        t0 = time.perf_counter()
        res = simulate(tr, strategy, examples=examples)
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0
        return res

    out: dict[str, Any] = {"task": task, **info}
    van = run("vanilla", heads())
    B: dict[str, float] = {"vanilla": van.block_efficiency}
    for h in (3, 6):
        B[f"vanilla-h{h}"] = run(f"vanilla-h{h}", heads(), tr=trace.first_heads(h)
                                 ).block_efficiency
    curve = oracle_curve(trace, ORACLE_KS, examples=ev, vanilla=van)
    out["oracle"] = {int(k): float(b) for k, b in zip(curve.ks, curve.b_oracle, strict=True)}
    B["oracle-16"] = out["oracle"][16]
    sims = {"vanilla": van}
    for name in ("2-gram", "4-gram", "neural-mini", "neural-small"):
        sims[name] = run(name, heads(1, name))
        B[name] = sims[name].block_efficiency
    pcurve: dict[str, dict[int, float]] = {"0-gram": {}, "4-gram": {}}
    for p in PS:
        pcurve["0-gram"][p] = run("p-best 0-gram", heads(p)).block_efficiency
        pcurve["4-gram"][p] = (B["4-gram"] if p == 1 else run(
            "p-best 4-gram", heads(p, "4-gram")).block_efficiency)
    B["16-best 0-gram"], B["16-best 4-gram"] = pcurve["0-gram"][16], pcurve["4-gram"][16]
    out["B"], out["pcurve"] = B, pcurve
    out["generated_tokens"] = int(van.total_generated)
    out["repetition"] = {name: repetition(sims[name]).to_dict() for name in ("vanilla", "2-gram")}
    out["wtl"] = {}
    for name in ("2-gram", "4-gram", "neural-mini", "neural-small"):
        t0 = time.perf_counter()
        # the drafter built here: the table records its name ("1-best NgramRescorer (k=16)")
        out["wtl"][name] = wins_ties_losses(trace, heads(1, name).build(),
                                            baseline=van).to_dict()
        timings["wtl"] = timings.get("wtl", 0.0) + time.perf_counter() - t0
    ent = head_entropy(trace, van)
    rows = np.random.default_rng(0).permutation(ent.entropy.shape[0])[:3000]
    out["entropy"] = {"mean": [float(x) for x in ent.mean], "h_max": int(ent.h_max),
                      "samples": np.asarray(ent.entropy)[np.sort(rows)].round(4).tolist()}
    out["alpha"] = {}
    for name in cfg.tune:
        tuned = {a: run(f"tune {name}", heads(1, name, a), examples=tune).block_efficiency
                 for a in cfg.alphas}
        best = max(cfg.alphas, key=lambda a: (tuned[a], -abs(a - 1.0)))
        b_best = B[name] if best == 1.0 else run(
            f"eval {name}", heads(1, name, best)).block_efficiency
        out["alpha"][name] = {"tune": {str(a): b for a, b in tuned.items()}, "best": best,
                              "eval_best": b_best, "eval_alpha1": B[name]}
    out["mismatches"] = int(van.num_mismatches)
    out["timings"] = timings
    out["wall_s"] = time.perf_counter() - t_task
    out["computed_at"] = environment()["commit"]
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(out) + "\n")
    out["from_cache"] = False
    log(f"{task}: done in {out['wall_s']:.0f} s (vanilla B {B['vanilla']:.3f}, 4-gram "
        f"{B['4-gram']:.3f}, oracle16 {B['oracle-16']:.3f})")
    return out


# ---------------------------------------------------------------------------- latency
def latency(cfg: EvalConfig, trace_paths: list[str]) -> dict[str, Any]:
    """p-best latency vs p (9x16) and 1-best latency vs lattice size, both backends, on real
    lattices drawn from the eval split of every task's trace (Kim Tables 12, 13)."""
    from blockdraft.lattice import SausageLattice
    from blockdraft.oracle import Trace
    from blockdraft.rescorers.latency import bench_rescore
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

    traces = [Trace.open(p) for p in trace_paths]
    pool = [(tr, e) for tr in traces for e in range(cfg.n_tune, len(tr))]

    def source(rng: np.random.Generator, h: int, k: int) -> tuple[SausageLattice, np.ndarray]:
        tr, e = pool[int(rng.integers(len(pool)))]
        ex = tr[e]
        t = int(rng.integers(ex.m))
        lat = ex.lattice(t, k)
        return SausageLattice(tokens=lat.tokens[:h], scores=lat.scores[:h]), ex.context(t)

    lm = NgramLM(MODELS / "lm4.bin")
    log("latency: loading the WFST of lm4 (converted once, then cached)")
    backends = {"exact": NgramRescorer(lm, 1.0),
                "wfst": NgramRescorer(NgramLM(MODELS / "lm4.arpa"), 1.0, backend="wfst")}
    log("latency: p-best vs p")
    pbest = bench_rescore(backends, source, kind="trace", hs=[9], ks=[16], ps=list(PS),
                          n=cfg.latency_n)
    log("latency: 1-best vs lattice size")
    sizes = bench_rescore(backends, source, kind="trace", hs=[3, 6, 9], ks=[2, 4, 8, 16],
                          ps=[1], n=cfg.latency_n)
    return {"pbest": [r.to_dict() for r in pbest], "sizes": [r.to_dict() for r in sizes],
            "lattices_from": sorted({tr.signature.get("task", "?") for tr in traces})}


# ---------------------------------------------------------------------------- end to end
def end_to_end(cfg: EvalConfig) -> dict[str, Any]:
    """Online decode vs plain greedy on a few eval prompts per task type (exact criterion)."""
    import torch

    from benchmarks.common.tasks import encode_prompt, load_task
    from blockdraft.drafts import DraftSpec
    from blockdraft.models import greedy_generate, load_model, load_tokenizer
    from blockdraft.rescorers.neural import NeuralRescorer
    from blockdraft.verify import decode

    torch.set_num_threads(2)
    model = load_model(MODELS / "small-h9").eval()
    tok = load_tokenizer(MODELS / "small-h9")
    eos = tok.eos_id if cfg.stop_at_eos else None
    prompts: list[tuple[str, list[int]]] = []
    for task in cfg.e2e_tasks:
        exs = load_task(task, SHARED, n=cfg.n_tune + cfg.n_eval, seed=cfg.seed)[cfg.n_tune:]
        budget = model.config.max_seq_len - cfg.max_new_tokens
        prompts += [(task, list(encode_prompt(e, tok, budget, bos_id=tok.eos_id).ids))
                    for e in exs[: cfg.e2e_prompts]]
    lm4: dict[str, Any] = {"rescorer": "ngram", "lm": str(MODELS / "lm4.bin")}

    def onnx(size: str) -> dict[str, Any]:
        """A RescorerLM on ONNX Runtime (no spec names that backend by file): an object."""
        return {"rescorer": "given", "given": NeuralRescorer(MODELS / f"rescorer-{size}",
                                                             backend="onnx")}

    strategies: list[tuple[str, Callable[[], DraftSpec]]] = [
        ("vanilla", lambda: DraftSpec("heads")),
        ("4-gram", lambda: DraftSpec("heads", k=cfg.k, **lm4)),
        ("neural-mini (onnx)", lambda: DraftSpec("heads", k=cfg.k, **onnx("mini"))),
        ("neural-small (onnx)", lambda: DraftSpec("heads", k=cfg.k, **onnx("small"))),
        ("4-best 0-gram", lambda: DraftSpec("heads", k=cfg.k, p=4)),
        ("4-best 4-gram", lambda: DraftSpec("heads", k=cfg.k, p=4, **lm4)),
        ("16-best 0-gram", lambda: DraftSpec("heads", k=cfg.k, p=16)),
        ("16-best 4-gram", lambda: DraftSpec("heads", k=cfg.k, p=16, **lm4)),
    ]
    greedy_s, refs = 0.0, []
    for _, ids in prompts:  # warm-up, then the timed reference
        greedy_generate(model, ids, 4, eos_id=eos)
    for _, ids in prompts:
        t0 = time.perf_counter()
        refs.append(greedy_generate(model, ids, cfg.max_new_tokens, eos_id=eos))
        greedy_s += time.perf_counter() - t0
    tokens = sum(len(r) for r in refs)
    rows = []
    for name, make in strategies:
        drafter = make()  # a spec: each decode builds its drafter (the n-gram LM loaded once)
        decode(model, prompts[0][1], drafter=drafter, max_new_tokens=4, eos_id=eos)
        tot = {"wall": 0.0, "forward": 0.0, "draft": 0.0, "calls": 0, "tokens": 0, "steps": 0,
               "step_forward": 0.0}
        lossless = True
        for (_, ids), ref in zip(prompts, refs, strict=True):
            res = decode(model, ids, drafter=drafter, max_new_tokens=cfg.max_new_tokens,
                         eos_id=eos)
            lossless &= res.tokens == ref
            tot["wall"] += res.wall_s
            tot["forward"] += res.forward_s
            tot["draft"] += res.draft_s
            tot["calls"] += res.calls
            tot["tokens"] += len(res.tokens)
            tot["steps"] += len(res.steps)
            tot["step_forward"] += sum(s.forward_s for s in res.steps)
        rows.append({
            "strategy": name, "B": tot["tokens"] / tot["calls"], "lossless": bool(lossless),
            "wall_s": tot["wall"], "forward_s": tot["forward"], "draft_s": tot["draft"],
            "other_s": tot["wall"] - tot["forward"] - tot["draft"],
            "speedup": greedy_s / tot["wall"],
            "ms_per_verify": 1e3 * tot["step_forward"] / max(1, tot["steps"]),
            "ms_draft_per_step": 1e3 * tot["draft"] / max(1, tot["steps"]),
        })
        log(f"e2e {name}: B {rows[-1]['B']:.2f} speedup {rows[-1]['speedup']:.2f}x "
            f"lossless {lossless}")
    return {"prompts": len(prompts), "tasks": list(cfg.e2e_tasks), "tokens": tokens,
            "greedy_s": greedy_s, "greedy_ms_per_token": 1e3 * greedy_s / tokens, "rows": rows,
            "threads": 2}


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer examples (make bench-quick)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny models, two tasks, a few examples: checks the harness in minutes")
    ap.add_argument("--tasks", default=None, help="comma-separated subset of the tasks")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: latency,e2e")
    ap.add_argument("--out", type=Path, default=None, help="results folder")
    ap.add_argument("--models", default=None,
                    help="only build these cached models (comma-separated names) and exit")
    args = ap.parse_args(argv)
    global MODELS
    preset = "smoke" if args.smoke else "quick" if args.quick else "full"
    cfg = PRESETS[preset]
    if cfg.smoke:
        MODELS = CACHE / "models-smoke"
    if args.tasks:
        cfg = replace(cfg, tasks=tuple(args.tasks.split(",")))
    out_dir = args.out or (RESULTS if preset == "full" else RESULTS / preset)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    if args.models:
        ensure_models(cfg.smoke, only=set(args.models.split(",")))
        return 0
    manifest = ensure_models(cfg.smoke)
    from blockdraft.rescorers.neural import NeuralRescorer

    for size in ("mini", "small"):  # export the ONNX graphs once, before the workers start
        NeuralRescorer(MODELS / f"rescorer-{size}", backend="onnx")
    results: dict[str, Any] = {}
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=cfg.workers, mp_context=spawn) as pool:
        futures = {pool.submit(evaluate_task, t, cfg, str(MODELS)): t for t in cfg.tasks}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
    tasks = {t: results[t] for t in cfg.tasks}
    skip = set(filter(None, args.skip.split(",")))
    lat = None if "latency" in skip else latency(cfg, [r["trace_path"] for r in tasks.values()])
    e2e = None if "e2e" in skip else end_to_end(cfg)
    report = {"preset": preset, "config": asdict(cfg), "models": manifest, "tasks": tasks,
              "latency": lat, "e2e": e2e, "signature": signature(cfg, manifest, n_tune=cfg.n_tune,
                                                                 n_eval=cfg.n_eval),
              "wall_s": time.perf_counter() - t_start,
              "command": "python -m benchmarks.bench_eval" + ("" if preset == "full" else
                                                              f" --{preset}")}
    (out_dir / "eval.json").write_text(json.dumps(report, indent=1) + "\n")
    from benchmarks.common.eval_report import write_report

    write_report(report, out_dir)
    log(f"wrote {out_dir}/eval.md ({(time.perf_counter() - t_start) / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
