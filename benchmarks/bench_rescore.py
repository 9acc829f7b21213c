"""Rescoring latency on real data: exact KenLM search vs pynini WFST composition.

    .venv/bin/python -m benchmarks.bench_rescore [--n 200] [--rounds 3] [--quick]

LM: a 4-gram over a 4,096-token byte-level BPE, both trained on the pretraining corpus of the
benchmark data folder (``$BLOCKDRAFT_SHARED_DATA``; see benchmarks/common/data.py). Lattices: "hits"
(slot i holds the true next token of WikiText-2 test at a random rank among distractors drawn
by the training unigram distribution; slot 1 certain) and "random" (uniformly random tokens).

Head to head (issue 11): on the same LM, lattices and contexts, in one run, the exact search
(p = 1 and p = 16), the project's WFST backend and a plain pynini pipeline (``compose``,
``project``, ``rmepsilon``, ``shortestpath(nshortest=p, unique=True)``; the LM compiled to an
FST once, outside the timing). The same again on real-vocabulary 6x16 lattices: SmolLM2 token
ids (V = 49,152) with a 4-gram over SmolLM2 ids of the same pretraining corpus (what
``blockdraft ngram train --text FILES --tokenizer smollm2 --order 4 -o PREFIX`` trains).

Writes benchmarks/results/rescore_latency.{md,json,png}: the head-to-head tables, the p-best
table (Kim et al. Table 12), the 1-best table over lattice sizes (Table 13), the exact-vs-WFST
agreement, and the issues' targets, each number with its signature.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.data import (
    CACHE,
    _key,
    bench_lm,
    heldout_file,
    heldout_ids,
    pretrain_files,
    pretrain_ids,
)
from blockdraft.core.signature import environment, format_signature, human_count  # noqa: E402
from blockdraft.lattice import SausageLattice  # noqa: E402
from blockdraft.rescorers.latency import LatencyRow, bench_rescore, hits_source, random_source  # noqa: E402
from blockdraft.rescorers.ngram import NgramLM, NgramRescorer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

TARGETS = [  # (kind, h, k, p, backend, max median ms) from issue 2 (Table 12 section)
    ("hits", 8, 16, 16, "exact", 2.0),
    ("hits", 16, 16, 16, "exact", 4.0),
    ("hits", 8, 16, 1, "exact", 1.0),
]
STEP_BUDGET_MS = 10.0
"""Issue 11: lattice + rescoring + bookkeeping <= 10% of one SmolLM2 verification forward
(~100-250 ms in float32 on this machine): about 10 ms for the rescoring of real lattices."""

SMOLLM2 = "smollm2"
PRUNED = (0, 0, 0, 1)
"""lmplz --prune of the smaller synthetic LM: 4-gram singletons dropped."""


# ------------------------------------------------------------------ the real-vocabulary LM
def smollm2_lm() -> tuple[dict, np.ndarray, np.ndarray]:
    """A 4-gram over SmolLM2 token ids of the pretraining corpus (cached under
    ``$BLOCKDRAFT_CACHE/bench``), as ``blockdraft ngram train --text FILES --tokenizer smollm2
    --order 4 -o PREFIX`` trains it (one document per non-empty line).

    Returns ``(meta, heldout ids, unigram)``: WikiText-2 test as SmolLM2 ids (never trained
    on) and the training corpus's unigram distribution over the V = 49,152 ids.
    """
    from blockdraft.models import load_tokenizer
    from blockdraft.training.ngram import train_ngram

    files = pretrain_files()
    prefix = CACHE / f"lm4-{SMOLLM2}-{_key(SMOLLM2, 4, *[f.name for f in files])}"
    meta_path = prefix.with_suffix(".json")
    held_path = prefix.with_name(prefix.name + ".heldout.npy")
    uni_path = prefix.with_name(prefix.name + ".unigram.npy")
    if meta_path.is_file() and held_path.is_file() and uni_path.is_file():
        return json.loads(meta_path.read_text()), np.load(held_path), np.load(uni_path)
    tok = load_tokenizer(SMOLLM2)
    info = tok.info(SMOLLM2)

    def encode(path: Path) -> list[np.ndarray]:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        return [np.asarray(ids, dtype=np.int64) for ids in tok.encode_batch(lines)]

    t0 = time.perf_counter()
    seqs: list[np.ndarray] = []
    for f in files:
        seqs += encode(f)
    print(f"SmolLM2-tokenized the pretraining corpus in {time.perf_counter() - t0:.1f}s")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    r = train_ngram(seqs, prefix, order=4, tokenizer=info)
    counts = np.bincount(np.concatenate(seqs), minlength=info.vocab_size).astype(np.float64)
    np.save(uni_path, counts / counts.sum())
    np.save(held_path, np.concatenate(encode(heldout_file())))
    meta = {
        "arpa": str(r.arpa), "binary": str(r.binary), "order": 4, "counts": list(r.counts),
        "num_ngrams": r.num_ngrams, "tokens": r.tokens, "seconds": round(r.seconds, 1),
        "command": f"blockdraft ngram train --text <{len(files)} pretraining corpus files> "
                   f"--tokenizer {SMOLLM2} --order 4 -o {prefix.name}",
        "lmplz": r.command, "tokenizer": SMOLLM2, "vocab_size": info.vocab_size,
    }
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta, np.load(held_path), np.load(uni_path)


# ------------------------------------------------------------------ the plain pynini pipeline
class PlainPipeline:
    """The textbook pynini pipeline over the same LM FST as the WFST backend.

    ``compose(lattice, LM)``, ``project("input")``, ``rmepsilon()``,
    ``shortestpath(nshortest=p, unique=True)``. The LM is compiled once (the WFST backend's
    cached FST, copied), its start state set to the context's state before each call and the
    lattice FST built arc by arc with pynini before the clock starts (costs ``-score``, so
    alpha = 1; input label token + 1, output label the LM's label: the same, or ``<unk>``'s
    for a token the LM does not know, as KenLM scores it: the job ``project`` does); the
    timing covers the four operations only.
    """

    def __init__(self, wfst_rescorer: NgramRescorer) -> None:
        import pynini

        inner = wfst_rescorer._wfst
        if inner is None or inner.lm is None or wfst_rescorer.alpha != 1.0:
            raise SystemExit("the plain pipeline needs a WFST rescorer with alpha = 1")
        self._pynini = pynini
        self._inner = inner
        self.lm = pynini.Fst.from_pywrapfst(inner.lm.fst.copy())
        self.lm.set_start(self.lm.start())  # makes the copy private now, not while timed

    def prepare(self, lattice: SausageLattice, context: np.ndarray) -> Any:
        """The lattice FST, with the LM's start set for ``context`` (not timed)."""
        pn = self._pynini
        self.lm.set_start(self._inner.start_state(context))
        olabels = self._inner._olabels(lattice)  # the LM's label of each token
        fst = pn.Fst()
        states = [fst.add_state() for _ in range(lattice.h + 1)]
        fst.set_start(states[0])
        fst.set_final(states[-1])
        for i in range(lattice.h):
            tokens, scores = lattice.slot(i)
            for j, (t, sc) in enumerate(zip(tokens.tolist(), scores.tolist(), strict=True)):
                fst.add_arc(states[i], pn.Arc(t + 1, int(olabels[i, j]), -sc, states[i + 1]))
        fst.arcsort("olabel")
        return fst

    def run(self, acceptor: Any, p: int) -> Any:
        """The four timed operations; returns the shortest-path FST."""
        pn = self._pynini
        c = pn.compose(acceptor, self.lm)
        c.project("input")
        c.rmepsilon()
        return pn.shortestpath(c, nshortest=p, unique=True)

    @staticmethod
    def strings(paths: Any) -> list[tuple[int, ...]]:
        """Token strings of a shortest-path FST, cheapest first (label t + 1 = token t)."""
        it = paths.paths()
        rows = []
        while not it.done():
            rows.append((float(it.weight()), tuple(x - 1 for x in it.ilabels() if x)))
            it.next()
        return [r for _, r in sorted(rows)]


@dataclass(frozen=True)
class HeadRow:
    """One backend at one lattice configuration of the head-to-head comparison.

    ``median_ms``: the median over rounds of each round's median over the ``n`` lattices
    (one call per lattice per round); ``round_ms``: each round's median; ``agreement``: the
    fraction of lattices whose drafts equal the exact search's (same strings, same order).
    """

    lattices: str
    kind: str
    h: int
    k: int
    p: int
    backend: str
    n: int
    rounds: int
    median_ms: float
    p90_ms: float
    round_ms: tuple[float, ...]
    agreement: float
    lm: str
    extra: dict[str, float]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def head_to_head(
    exact: NgramRescorer, wfst: NgramRescorer, plain: PlainPipeline,
    cases: list[tuple[SausageLattice, np.ndarray]], *, lattices: str, kind: str, p: int,
    rounds: int, lm_name: str,
) -> list[HeadRow]:
    """Time the exact search, the WFST backend and the plain pipeline on the same lattices.

    Each round runs every backend over all lattices (one call each, after three warm-up
    calls), in a rotating backend order, so that a busy moment of the machine hits all three.
    """
    names = ("exact", "wfst", "plain")
    times: dict[str, list[list[float]]] = {b: [] for b in names}
    acceptor_ms: list[float] = []
    outs: dict[str, list[list[tuple[int, ...]]]] = {}

    def run_exact(r: NgramRescorer, lat: SausageLattice, ctx: np.ndarray) -> tuple[float, Any]:
        t0 = time.perf_counter()
        out = r.rescore(lat, ctx, p)
        return time.perf_counter() - t0, out

    def run_plain(lat: SausageLattice, ctx: np.ndarray) -> tuple[float, Any]:
        t0 = time.perf_counter()
        acc = plain.prepare(lat, ctx)
        t1 = time.perf_counter()
        acceptor_ms.append((t1 - t0) * 1e3)
        t0 = time.perf_counter()
        out = plain.run(acc, p)
        return time.perf_counter() - t0, out

    for rnd in range(rounds):
        order = names[rnd % 3:] + names[:rnd % 3]
        for name in order:
            def call(lat: SausageLattice, ctx: np.ndarray, name: str = name) -> tuple[float, Any]:
                if name == "plain":
                    return run_plain(lat, ctx)
                return run_exact(exact if name == "exact" else wfst, lat, ctx)

            for lat, ctx in cases[:3]:
                call(lat, ctx)
            ts, got = [], []
            for lat, ctx in cases:
                dt, out = call(lat, ctx)
                ts.append(dt * 1e3)
                if rnd == 0:
                    got.append(PlainPipeline.strings(out) if name == "plain"
                               else [tuple(r) for r in out.tokens.tolist()])
            times[name].append(ts)
            if rnd == 0:
                outs[name] = got
    rows = []
    h, k = cases[0][0].h, cases[0][0].k
    for name in names:
        per_round = [float(np.median(t)) for t in times[name]]
        flat = np.concatenate([np.asarray(t) for t in times[name]])
        agree = float(np.mean([a == b for a, b in zip(outs["exact"], outs[name], strict=True)]))
        extra: dict[str, float] = {}
        if name == "plain":
            extra["acceptor_ms"] = float(np.median(acceptor_ms))
        if name == "wfst":
            extra["agree_plain"] = float(np.mean(
                [a == b for a, b in zip(outs["wfst"], outs["plain"], strict=True)]))
        if name == "exact" and exact.last_stats is not None:
            extra["lookups_last"] = float(np.sum(exact.last_stats.lookups))
        rows.append(HeadRow(
            lattices=lattices, kind=kind, h=h, k=k, p=p, backend=name, n=len(cases),
            rounds=rounds, median_ms=float(np.median(per_round)),
            p90_ms=float(np.percentile(flat, 90)), round_ms=tuple(per_round), agreement=agree,
            lm=lm_name, extra=extra,
        ))
    return rows


def load_average() -> float:
    """The 1-minute load average (the machine is shared: reported beside the timings)."""
    try:
        return float(os.getloadavg()[0])
    except OSError:
        return float("nan")


def make_cases(source: Any, h: int, k: int, n: int, seed: int) -> list[tuple[SausageLattice,
                                                                          np.ndarray]]:
    rng = np.random.default_rng([seed, h, k])
    return [source(rng, h, k) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="lattices per configuration")
    ap.add_argument("--rounds", type=int, default=3,
                    help="head-to-head rounds (each backend over all lattices per round)")
    ap.add_argument("--quick", action="store_true", help="fewer lattices and sizes")
    ap.add_argument("--head-only", action="store_true",
                    help="only the head-to-head tables (skip Kim et al. Tables 12 and 13)")
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--results", type=Path, default=RESULTS,
                    help="folder for rescore_latency.{md,json,png} (default: %(default)s)")
    args = ap.parse_args()
    n = 30 if args.quick else args.n
    rounds = 1 if args.quick else args.rounds
    if args.alpha != 1.0:
        raise SystemExit("the head-to-head with the plain pipeline needs --alpha 1.0")

    t0 = time.perf_counter()
    meta, tok, tok_path = bench_lm(4)
    held = heldout_ids(tok)
    counts = np.bincount(np.concatenate(pretrain_ids(tok, tok_path)),
                         minlength=tok.get_vocab_size()).astype(np.float64)
    unigram = counts / counts.sum()
    lm_exact = NgramLM(meta["binary"])  # bounds come from the ARPA file beside it
    exact = NgramRescorer(lm_exact, alpha=args.alpha)
    t_wfst = time.perf_counter()
    wfst = NgramRescorer(NgramLM(meta["arpa"]), alpha=args.alpha, backend="wfst")
    wfst_load = time.perf_counter() - t_wfst
    plain = PlainPipeline(wfst)
    backends = {"exact": exact, "wfst": wfst}
    print(f"setup {time.perf_counter() - t0:.1f}s (WFST load/convert {wfst_load:.1f}s)")

    hits = hits_source(held, unigram)
    rand = random_source(tok.get_vocab_size())
    load_before = load_average()
    head: list[HeadRow] = []
    lm_name = f"bpe4096 4-gram {human_count(meta['num_ngrams'])}"
    for h in (8, 16):
        cases = make_cases(hits, h, 16, n, seed=3)
        for p in (1, 16):
            head += head_to_head(exact, wfst, plain, cases, lattices="synthetic", kind="hits",
                                 p=p, rounds=rounds, lm_name=lm_name)
            print(format_head_rows(head[-3:]))
    # The same lattices over a smaller LM of the same corpus (4-gram singletons pruned): the
    # plain pipeline's cost grows with the LM, the exact search's hardly.
    pmeta: dict | None = None
    if not args.quick:
        pmeta, _, _ = bench_lm(4, prune=PRUNED)
        p_exact = NgramRescorer(NgramLM(pmeta["binary"]), alpha=args.alpha)
        p_wfst = NgramRescorer(NgramLM(pmeta["arpa"]), alpha=args.alpha, backend="wfst")
        p_plain = PlainPipeline(p_wfst)
        p_name = f"bpe4096 4-gram {human_count(pmeta['num_ngrams'])}"
        for h in (8, 16):
            cases = make_cases(hits, h, 16, n, seed=3)
            for p in (1, 16):
                head += head_to_head(p_exact, p_wfst, p_plain, cases,
                                     lattices="synthetic-pruned", kind="hits", p=p,
                                     rounds=rounds, lm_name=p_name)
                print(format_head_rows(head[-3:]))
        del p_exact, p_wfst, p_plain

    # Real vocabulary: SmolLM2 ids, a 4-gram over SmolLM2 ids.
    t1 = time.perf_counter()
    rmeta, rheld, runi = smollm2_lm()
    rlm = NgramLM(rmeta["binary"])
    rexact = NgramRescorer(rlm, alpha=args.alpha)
    rwfst = NgramRescorer(NgramLM(rmeta["arpa"]), alpha=args.alpha, backend="wfst")
    rplain = PlainPipeline(rwfst)
    print(f"real-vocabulary setup {time.perf_counter() - t1:.1f}s")
    rlm_name = f"smollm2 4-gram {human_count(rmeta['num_ngrams'])}"
    real: list[HeadRow] = []
    for kind, source in (("random", random_source(int(rmeta["vocab_size"]))),
                         ("hits", hits_source(rheld, runi))):
        cases = make_cases(source, 6, 16, n, seed=4)
        for p in (1, 16):
            real += head_to_head(rexact, rwfst, rplain, cases, lattices="real-vocabulary",
                                 kind=kind, p=p, rounds=rounds, lm_name=rlm_name)
            print(format_head_rows(real[-3:]))
    load_after = load_average()

    pbest: list[LatencyRow] = []
    sizes: list[LatencyRow] = []
    rand_rows: list[LatencyRow] = []
    if not args.head_only:
        ps = [1, 2, 4, 8, 16]
        pbest = bench_rescore(backends, hits, kind="hits", hs=[8, 16], ks=[16], ps=ps, n=n)
        sizes_h = [4, 8] if args.quick else [4, 8, 16]
        sizes_k = [4, 16] if args.quick else [2, 4, 8, 16]
        sizes = bench_rescore(backends, hits, kind="hits", hs=sizes_h, ks=sizes_k, ps=[1],
                              n=n, seed=1)
        rand_rows = bench_rescore(backends, rand, kind="random", hs=[8, 16], ks=[16],
                                  ps=[1, 16], n=n, seed=2)

    env = environment()
    sig_fields = {
        "lm": Path(meta["binary"]).name, "ngrams": human_count(meta["num_ngrams"]),
        "counts": "/".join(map(str, meta["counts"])),
        "order": meta["order"], "tokenizer": meta["tokenizer"], "heldout": "wikitext2-test",
        "pruned_lm": Path(pmeta["binary"]).name if pmeta else "-",
        "pruned_ngrams": human_count(pmeta["num_ngrams"]) if pmeta else "-",
        "real_lm": Path(rmeta["binary"]).name,
        "real_ngrams": human_count(rmeta["num_ngrams"]),
        "real_counts": "/".join(map(str, rmeta["counts"])),
        "alpha": args.alpha, "n": n, "rounds": rounds,
        "exact": "native,bounds:" + (str(lm_exact.native_model.has_bounds)
                                     if lm_exact.native_model is not None else "-")
                 + f",beam:{exact.prune_beam}",
        "wfst": "pynini-eps-backoff", "plain": "compose/project/rmepsilon/shortestpath-unique",
        **env,
    }
    signature = format_signature(sig_fields)
    write_results(args.results, head, real, pbest, sizes, rand_rows, signature, sig_fields,
                  meta, pmeta, rmeta, wfst_load, (load_before, load_after))
    print((args.results / "rescore_latency.md").read_text())


def format_head_rows(rows: list[HeadRow]) -> str:
    return "  ".join(f"{r.lattices} {r.kind} {r.h}x{r.k} p={r.p} {r.backend} "
                     f"{r.median_ms:.2f} ms" for r in rows)


def _index(rows: list[LatencyRow]) -> dict[tuple, LatencyRow]:
    return {(r.kind, r.h, r.k, r.p, r.backend): r for r in rows}


def _head_table(rows: list[HeadRow]) -> list[str]:
    """One line per (lattices, kind, shape, p): the three backends and their ratios."""
    by = {(r.lattices, r.kind, r.h, r.k, r.p, r.backend): r for r in rows}
    out = ["| lattices | h x k | p | exact ms | WFST ms | plain ms (+ lattice FST) | "
           "plain / exact | plain / WFST | WFST = exact | plain = exact | WFST = plain |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    seen = []
    for r in rows:
        key = (r.lattices, r.kind, r.h, r.k, r.p)
        if key in seen:
            continue
        seen.append(key)
        e, w, pl = (by[(*key, b)] for b in ("exact", "wfst", "plain"))
        out.append(
            f"| {r.kind} | {r.h}x{r.k} | {r.p} | {e.median_ms:.2f} | {w.median_ms:.2f} | "
            f"{pl.median_ms:.2f} (+{pl.extra.get('acceptor_ms', float('nan')):.2f}) | "
            f"{pl.median_ms / e.median_ms:.1f}x | {pl.median_ms / w.median_ms:.2f}x | "
            f"{w.agreement:.0%} | {pl.agreement:.0%} | "
            f"{w.extra.get('agree_plain', float('nan')):.0%} |")
    return out


def _spread(rows: list[HeadRow]) -> str:
    """The largest relative spread of per-round medians (max / min - 1) over the rows."""
    spreads = [max(r.round_ms) / min(r.round_ms) - 1 for r in rows if min(r.round_ms) > 0]
    return f"{max(spreads):.0%}" if spreads else "n/a"


def write_results(out: Path, head: list[HeadRow], real: list[HeadRow],
                  pbest: list[LatencyRow], sizes: list[LatencyRow], rand_rows: list[LatencyRow],
                  signature: str, sig_fields: dict, meta: dict, pmeta: dict | None,
                  rmeta: dict, wfst_load: float, loads: tuple[float, float]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    by = _index(pbest)
    hb = {(r.lattices, r.kind, r.h, r.k, r.p, r.backend): r for r in head + real}
    cmd = "make bench-rescore  (= .venv/bin/python -m benchmarks.bench_rescore)"
    rounds = head[0].rounds if head else 0
    lines = [
        "# Rescoring latency: exact KenLM search vs pynini WFST composition",
        "",
        f"Command: `{cmd}`",
        "",
        f"Signature: `{signature}`",
        "",
        f"LM: {meta['order']}-gram, {meta['num_ngrams']:,} n-grams "
        f"({', '.join(f'{c:,}' for c in meta['counts'])}) over {meta['tokens']:,} BPE tokens, "
        f"`{meta['command'].split(' -T ')[0]}`. WFST backend: ARPA converted to an OpenFst "
        f"WFST with epsilon backoff arcs (cached), load {wfst_load:.1f} s. Times: median of "
        "single `rescore` calls (ms), one process, 2-core shared VM: medians of the same "
        "configuration vary by about 10-20% between runs.",
        "",
        "## Head to head: exact search, WFST backend, plain pynini pipeline (issue 11)",
        "",
        "Same LM, lattices and contexts, one run. *exact*: `NgramRescorer(backend=\"exact\")`"
        ", the whole `rescore` call; *WFST*: `NgramRescorer(backend=\"wfst\")`, the whole "
        "call; *plain*: `compose(lattice, LM)`, `project(\"input\")`, `rmepsilon()`, "
        "`shortestpath(nshortest=p, unique=True)` with pynini over the same compiled LM FST "
        "(compiled once, outside the timing; its start state set to the context's state and "
        "the lattice FST built before the clock starts: its build time is the (+ ...) "
        f"figure). Median over {rounds} rounds of the per-round median over the "
        f"lattices; rounds rotate the backend order; the per-round medians spread by up to "
        f"{_spread(head + real)}. Load average (1 min) {loads[0]:.2f} before, {loads[1]:.2f} "
        "after. Agreement (=): the lattices on which two backends return the same drafts "
        "(same strings, same order). *plain* is exactly the WFST backend's semantics (the "
        "same LM FST; the backend shifts and scales the lattice costs and prunes before its "
        "unique-path search without changing the result, see "
        "`blockdraft.rescorers.ngram.wfst.rescorer`): they differ only on float32 ties.",
        "",
        f"### Synthetic hits-heavy lattices, {meta['order']}-gram over BPE-4096 ids, "
        f"{meta['num_ngrams']:,} n-grams",
        "",
        *_head_table([r for r in head if r.lattices == "synthetic"]),
        "",
        *([f"### The same lattices over a smaller LM: 4-gram singletons pruned "
           f"(`--prune {' '.join(map(str, PRUNED))}`), {pmeta['num_ngrams']:,} n-grams "
           f"({', '.join(f'{c:,}' for c in pmeta['counts'])})", "",
           *_head_table([r for r in head if r.lattices == "synthetic-pruned"]), ""]
          if pmeta else []),
        f"### Real-vocabulary lattices: SmolLM2 ids (V = {rmeta['vocab_size']:,}), "
        f"{rmeta['order']}-gram over SmolLM2 ids, {rmeta['num_ngrams']:,} n-grams",
        "",
        f"LM: ({', '.join(f'{c:,}' for c in rmeta['counts'])}) n-grams over "
        f"{rmeta['tokens']:,} tokens of the same pretraining corpus, `{rmeta['command']}`. "
        "*random*: every arc a uniformly random SmolLM2 id; *hits*: slot i holds the true next "
        "token of WikiText-2 test (SmolLM2-tokenized) at a random rank among distractors drawn "
        "by the corpus's SmolLM2 unigram distribution. Slot 1 certain in both.",
        "",
        *_head_table(real),
        "",
    ]
    # Targets of issue 11.
    lines += ["## Targets (issue 11)", "", "| target | measured | met |", "|---|---|---|"]

    def target(label: str, value: float | None, ok: bool | None, unit: str = "ms") -> None:
        if value is None or ok is None:
            lines.append(f"| {label} | not measured | - |")
            return
        shown = f"{value:.2f} ms" if unit == "ms" else f"{value:.1f}x"
        lines.append(f"| {label} | {shown} | {'yes' if ok else 'no'} |")

    for lattices, what in (("synthetic", f"{human_count(meta['num_ngrams'])}-gram LM"),
                           ("synthetic-pruned", "pruned LM")):
        e16 = hb.get((lattices, "hits", 8, 16, 16, "exact"))
        pl16 = hb.get((lattices, "hits", 8, 16, 16, "plain"))
        if e16 is None:
            continue
        target(f"synthetic hits 8x16, {what}, p = 16: exact <= 2.0 ms", e16.median_ms,
               e16.median_ms <= 2.0)
        ratio = pl16.median_ms / e16.median_ms if pl16 else None
        target(f"synthetic hits 8x16, {what}, p = 16: exact >= 10x faster than the plain "
               "pipeline", ratio, None if ratio is None else ratio >= 10, unit="x")
        for h in (8, 16):
            for p in (1, 16):
                w = hb.get((lattices, "hits", h, 16, p, "wfst"))
                pl = hb.get((lattices, "hits", h, 16, p, "plain"))
                r = pl.median_ms / w.median_ms if w and pl else None
                target(f"synthetic hits {h}x16, {what}, p = {p}: WFST backend no slower than "
                       "the plain pipeline (plain / WFST >= 1)", r,
                       None if r is None else r >= 1.0, unit="x")
    for kind in ("random", "hits"):
        for p in (1, 16):
            e = hb.get(("real-vocabulary", kind, 6, 16, p, "exact"))
            target(f"real-vocabulary {kind} 6x16, p = {p}: exact within the step budget "
                   f"(<= {STEP_BUDGET_MS:.0f} ms)", None if e is None else e.median_ms,
                   None if e is None else e.median_ms <= STEP_BUDGET_MS)
            w = hb.get(("real-vocabulary", kind, 6, 16, p, "wfst"))
            pl = hb.get(("real-vocabulary", kind, 6, 16, p, "plain"))
            r = pl.median_ms / w.median_ms if w and pl else None
            target(f"real-vocabulary {kind} 6x16, p = {p}: WFST backend no slower than the "
                   "plain pipeline (plain / WFST >= 1)", r, None if r is None else r >= 1.0,
                   unit="x")
    lines.append("")
    if pbest:
        lines += [
            "## p-best latency vs p (Kim et al. Table 12), hits-heavy lattices",
            "",
            "Each backend alone over the lattices (`blockdraft.rescorers.latency`), as before.",
            "",
            "| h x k | p | exact ms | WFST ms | WFST / exact | agreement | exact LM lookups |",
            "|---|---|---|---|---|---|---|",
        ]
        for h in (8, 16):
            for p in (1, 2, 4, 8, 16):
                ex = by.get(("hits", h, 16, p, "exact"))
                wf = by.get(("hits", h, 16, p, "wfst"))
                if ex and wf:
                    lines.append(f"| {h}x16 | {p} | {ex.median_ms:.2f} | {wf.median_ms:.2f} | "
                                 f"{wf.median_ms / ex.median_ms:.1f}x | {wf.agreement:.0%} | "
                                 f"{ex.lookups:,.0f} |")
        _old_tables(lines, by, sizes, rand_rows)
    lines += ["", "Agreement: the fraction of lattices on which the WFST backend returns "
              "exactly the exact backend's drafts (same strings, same order). The WFST "
              "backend's epsilon backoff arcs can under-cost a path (see "
              "`blockdraft.rescorers.ngram.wfst`).", ""]
    (out / "rescore_latency.md").write_text("\n".join(lines))
    (out / "rescore_latency.json").write_text(json.dumps(
        {"command": cmd, "signature": signature, "fields": sig_fields, "lm": meta,
         "pruned_lm": pmeta, "real_lm": rmeta, "wfst_load_s": wfst_load,
         "load_average": list(loads),
         "head_to_head": [r.to_dict() for r in head],
         "real_vocabulary": [r.to_dict() for r in real],
         "pbest": [r.to_dict() for r in pbest], "sizes": [r.to_dict() for r in sizes],
         "random": [r.to_dict() for r in rand_rows]}, indent=1))
    plot(out, head, real, pbest, sizes, signature)


def _old_tables(lines: list[str], by: dict[tuple, LatencyRow], sizes: list[LatencyRow],
                rand_rows: list[LatencyRow]) -> None:
    lines += [
        "",
        "## 1-best latency vs lattice size (Kim et al. Table 13), hits-heavy lattices",
        "",
        "| h | k | exact ms | WFST ms | agreement |",
        "|---|---|---|---|---|",
    ]
    by_size = _index(sizes)
    for r in sizes:
        if r.backend == "exact":
            w = by_size[(r.kind, r.h, r.k, 1, "wfst")]
            lines.append(f"| {r.h} | {r.k} | {r.median_ms:.2f} | {w.median_ms:.2f} | "
                         f"{w.agreement:.0%} |")
    lines += [
        "",
        "## Random-token lattices",
        "",
        "| h x k | p | exact ms | WFST ms | agreement |",
        "|---|---|---|---|---|",
    ]
    by_rand = _index(rand_rows)
    for r in rand_rows:
        if r.backend == "exact":
            w = by_rand[("random", r.h, r.k, r.p, "wfst")]
            lines.append(f"| {r.h}x{r.k} | {r.p} | {r.median_ms:.2f} | {w.median_ms:.2f} | "
                         f"{w.agreement:.0%} |")
    lines += ["", "## Targets (issue 2, this section's lattices)", "",
              "| lattices | p | target | measured | met |",
              "|---|---|---|---|---|"]
    for kind, h, k, p, backend, limit in TARGETS:
        found = by.get((kind, h, k, p, backend))
        if found:
            lines.append(f"| {kind} {h}x{k} | {p} | <= {limit} ms | {found.median_ms:.2f} ms | "
                         f"{'yes' if found.median_ms <= limit else 'no'} |")
    lines += ["", "Issue 2 also asked for 8x16, p = 16 >= 10x faster than the WFST pipeline: now "
              "measured against the plain pynini pipeline in the head-to-head tables above (the "
              "project's WFST backend itself is several times faster than that pipeline since "
              "its pruned unique-path search, so a ratio to it no longer measures the same "
              "thing)."]


def plot(out: Path, head: list[HeadRow], real: list[HeadRow], pbest: list[LatencyRow],
         sizes: list[LatencyRow], signature: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3 if pbest else 1, figsize=(18 if pbest else 8, 5.2),
                             squeeze=False, gridspec_kw={"width_ratios": [1.8, 1, 1]}
                             if pbest else None)
    ax = axes[0][0]
    groups = []
    for r in head + real:
        g = (r.lattices, r.kind, r.h, r.k, r.p)
        if g not in groups:
            groups.append(g)
    width = 0.27
    colors = {"exact": "tab:blue", "wfst": "tab:orange", "plain": "tab:gray"}
    hb = {(r.lattices, r.kind, r.h, r.k, r.p, r.backend): r for r in head + real}
    for j, backend in enumerate(("exact", "wfst", "plain")):
        xs = [i + (j - 1) * width for i in range(len(groups))]
        ys = [hb[(*g, backend)].median_ms for g in groups]
        ax.bar(xs, ys, width, color=colors[backend], label=backend)
    names = {"synthetic": "BPE", "synthetic-pruned": "BPE pruned",
             "real-vocabulary": "SmolLM2"}
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{names.get(g[0], g[0])} {g[1]}\n{g[2]}x{g[3]} p={g[4]}"
                        for g in groups], fontsize=6, rotation=60, ha="right")
    ax.axhline(2.0, color="tab:red", lw=0.8, ls=":", label="2 ms")
    ax.set_yscale("log")
    ax.set_ylabel("median latency (ms)")
    ax.set_title("head to head: exact, WFST backend, plain pynini")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    if pbest:
        colors_h = {4: "tab:green", 8: "tab:blue", 16: "tab:red"}
        ax = axes[0][1]
        for backend, style in (("exact", "o-"), ("wfst", "s--")):
            for h in (8, 16):
                pts = sorted((r.p, r.median_ms) for r in pbest
                             if r.h == h and r.backend == backend)
                if pts:
                    ax.plot(*zip(*pts, strict=True), style, color=colors_h[h],
                            label=f"{backend} {h}x16")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("p (drafts)")
        ax.set_ylabel("median latency (ms)")
        ax.set_title("p-best latency, hits-heavy lattices")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        ax = axes[0][2]
        for backend, style in (("exact", "o-"), ("wfst", "s--")):
            for h in sorted({r.h for r in sizes}):
                pts = sorted((r.k, r.median_ms) for r in sizes
                             if r.h == h and r.backend == backend)
                if len(pts) > 1:
                    ax.plot(*zip(*pts, strict=True), style, color=colors_h.get(h),
                            label=f"{backend} h={h}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("k (arcs per slot)")
        ax.set_title("1-best latency vs lattice size")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(signature, fontsize=5)
    fig.tight_layout()
    fig.savefig(out / "rescore_latency.png", dpi=120)


def replot(out: Path) -> None:
    """Redraw ``rescore_latency.png`` from the JSON of a run (no new measurements)."""
    data = json.loads((out / "rescore_latency.json").read_text())

    def head_rows(key: str) -> list[HeadRow]:
        return [HeadRow(**{**r, "round_ms": tuple(r["round_ms"])}) for r in data[key]]

    plot(out, head_rows("head_to_head"), head_rows("real_vocabulary"),
         [LatencyRow(**r) for r in data["pbest"]], [LatencyRow(**r) for r in data["sizes"]],
         data["signature"])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--replot"]:
        replot(Path(sys.argv[2]) if len(sys.argv) > 2 else RESULTS)
    else:
        main()
