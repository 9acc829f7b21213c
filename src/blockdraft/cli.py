"""The ``blockdraft`` command.

Subcommands (``blockdraft COMMAND --help`` for each):

    oracle TRACE            oracle block efficiency B_oracle(k) and the curve B_oracle(k)/B
    repetition TRACE        consecutive repetition in drafts, vanilla vs n-gram rescored
    entropy TRACE           head entropies, their means and h_max
    train                   train a BlockwiseLM (or RescorerLM) and its tokenizer
    trace                   greedy-decode prompts with a model and record a trace
    decode                  decode a prompt with BPD (any drafter, rescorer, criterion)
    rescore LATTICE         the p best drafts of a lattice file under an n-gram LM
    lattice draw LATTICE    a drawing like Kim et al. Fig. 4 (DOT, SVG, PNG)
    ngram train             an n-gram LM over token ids with lmplz + build_binary
    bench rescore           p-best latency of the exact and WFST backends, side by side
    demo                    the whole pipeline on a small corpus (default: Python's own docs)

Human tables by default, ``--json`` for machines, ``--plot FILE.png`` where a picture helps.
Exit codes: 0 success, 1 error (a message on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.errors import BlockdraftError


class CliError(BlockdraftError):
    """A command could not run with the arguments it was given."""


# --------------------------------------------------------------------------- output helpers
def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]],
                caption: str | None = None) -> None:
    """A rich table on stdout."""
    from rich.table import Table

    table = Table(title=title, caption=caption, caption_justify="left")
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*[_fmt(v) for v in r])
    _console().print(table)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, default=_json_default))


def _json_default(o: object) -> object:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    raise TypeError(f"cannot serialise {type(o).__name__}")


def progress_bar(description: str) -> Callable[[Iterable[Any]], Iterable[Any]]:
    """Wrap an iterable in a rich progress bar on stderr (silent when stderr is no TTY)."""

    def wrap(items: Iterable[Any]) -> Iterable[Any]:
        from rich.console import Console
        from rich.progress import track

        items = list(items)
        console = Console(stderr=True)
        return track(items, description=description, console=console,
                     disable=not console.is_terminal, transient=True)

    return wrap


def _csv_ints(text: str, what: str, minimum: int, allow_empty: bool) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None
    if (not vals and not allow_empty) or any(v < minimum for v in vals):
        raise argparse.ArgumentTypeError(f"expected {what} >= {minimum}, got {text!r}")
    return vals


def int_list(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]`` (argparse type): positive integers, at least one."""
    return _csv_ints(text, "positive integers", 1, allow_empty=False)


def id_list(text: str) -> list[int]:
    """``"17,4,99"`` -> token ids (argparse type; may be empty)."""
    return _csv_ints(text, "token ids", 0, allow_empty=True)


def read_id_lines(path: Path) -> list[np.ndarray]:
    """A file of whitespace-separated token ids, one sequence per line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                out.append(np.array([int(x) for x in parts], dtype=np.int64))
            except ValueError as e:
                raise CliError(f"{path}:{lineno}: not a line of integer token ids ({e})") from e
    return out


# --------------------------------------------------------------------------- ngram train
def cmd_ngram_train(args: argparse.Namespace) -> int:
    from blockdraft.rescorers.ngram import train_ngram
    from blockdraft.signature import human_count

    if args.ids:
        seqs: list[np.ndarray] = []
        for f in args.ids:
            seqs += read_id_lines(Path(f))
    else:
        if not args.tokenizer:
            raise CliError("--text needs --tokenizer (a tokenizer.json or GPT-2 vocab/merges dir)")
        from blockdraft.models.tokenizer import Tokenizer

        tok = Tokenizer.load(args.tokenizer)
        lines = []
        for f in args.text:
            lines += [ln for ln in Path(f).read_text(encoding="utf-8").splitlines() if ln.strip()]
        seqs = [np.asarray(ids, dtype=np.int64) for ids in tok.encode_batch(lines)]
    r = train_ngram(seqs, args.output, order=args.order, prune=args.prune, memory=args.memory,
                    binary=not args.no_binary)
    if args.json:
        print_json({"arpa": r.arpa, "binary": r.binary, "order": r.order, "counts": r.counts,
                    "tokens": r.tokens, "discount_fallback": r.discount_fallback,
                    "seconds": r.seconds, "command": r.command})
        return 0
    print_table(
        f"n-gram LM ({human_count(r.num_ngrams)} n-grams, {human_count(r.tokens)} tokens)",
        ["order", "n-grams"], [(i + 1, c) for i, c in enumerate(r.counts)],
        caption=f"ARPA {r.arpa}\nbinary {r.binary}\n{r.command}"
        + ("\n(--discount_fallback was needed)" if r.discount_fallback else ""),
    )
    return 0


# --------------------------------------------------------------------------- rescore
def cmd_rescore(args: argparse.Namespace) -> int:
    from blockdraft.lattice.io import load_lattice
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

    lf = load_lattice(args.lattice)
    context = np.asarray(args.context, dtype=np.int64) if args.context is not None else lf.context
    lm = NgramLM(args.lm)
    drafts = NgramRescorer(lm, alpha=args.alpha, backend=args.backend).rescore(
        lf.lattice, context, args.p
    )
    note = (f"the lattice has {lf.lattice.num_paths} paths, fewer than p = {args.p}: all returned"
            if drafts.exhausted else None)
    if args.json:
        print_json({"tokens": drafts.tokens, "scores": drafts.scores,
                    "head_scores": drafts.head_scores, "lm_scores": drafts.lm_scores,
                    "alpha": drafts.alpha, "backend": args.backend, "requested": args.p,
                    "exhausted": drafts.exhausted, "context": context})
        return 0
    print_table(
        f"{drafts.p}-best drafts ({args.backend}, alpha={args.alpha}, order-{lm.order} LM)",
        ["rank", "draft (token ids)", "score", "head", "LM"],
        [(i + 1, " ".join(map(str, drafts.tokens[i].tolist())), drafts.scores[i],
          drafts.head_scores[i], drafts.lm_scores[i]) for i in range(drafts.p)],
        caption=note,
    )
    return 0


# --------------------------------------------------------------------------- lattice draw
def cmd_lattice_draw(args: argparse.Namespace) -> int:
    from blockdraft.lattice.draw import draw_lattice
    from blockdraft.lattice.io import load_lattice

    lf = load_lattice(args.lattice)
    reference = lf.reference if args.reference is None else np.asarray(args.reference)
    labels = None
    if args.tokenizer:
        from blockdraft.models.tokenizer import Tokenizer

        tok = Tokenizer.load(args.tokenizer)

        def labels(t: int) -> str:
            return tok.decode([t])

    draw_lattice(lf.lattice, args.output, reference=reference, labels=labels)
    print(f"wrote {args.output}")
    return 0


# --------------------------------------------------------------------------- bench rescore
def cmd_bench_rescore(args: argparse.Namespace) -> int:
    from blockdraft.bench.rescore import bench_rescore, hits_source, random_source
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer
    from blockdraft.signature import environment, format_signature

    lm = NgramLM(args.lm)
    backends: dict[str, Any] = {}
    for b in args.backends.split(","):
        if b == "exact":
            backends[b] = NgramRescorer(lm, alpha=args.alpha)
        elif b == "wfst":
            backends[b] = NgramRescorer(NgramLM(args.arpa or args.lm), alpha=args.alpha,
                                        backend="wfst")
        else:
            raise CliError(f"unknown backend {b!r}; choose from exact, wfst")
    if args.kind == "hits":
        if not args.heldout:
            raise CliError("--kind hits needs --heldout FILE (held-out token ids)")
        held = np.concatenate(read_id_lines(Path(args.heldout)))
        unigram = np.bincount(held, minlength=int(held.max()) + 1).astype(np.float64)
        source = hits_source(held, unigram / unigram.sum())
    else:
        source = random_source(lm.max_token_id + 1)
    rows = bench_rescore(backends, source, kind=args.kind, hs=args.h, ks=args.k, ps=args.p,
                         n=args.n, seed=args.seed,
                         reference="exact" if "exact" in backends else None,
                         progress=progress_bar("timing"))
    sig = format_signature({"lm": Path(args.lm).name, "order": lm.order, "kind": args.kind,
                            "alpha": args.alpha, "n": args.n, "seed": args.seed,
                            **environment()})
    if args.json:
        print_json({"signature": sig, "rows": [r.to_dict() for r in rows]})
        return 0
    names = list(backends)
    grid = sorted({(r.h, r.k, r.p) for r in rows})
    by = {(r.h, r.k, r.p, r.backend): r for r in rows}
    cols = ["h x k", "p"] + [f"{b} ms (median)" for b in names]
    if "exact" in names and len(names) > 1:
        cols += ["speedup", "agreement"]
    table_rows = []
    for h, k, p in grid:
        cells: list[object] = [f"{h}x{k}", p] + [by[(h, k, p, b)].median_ms for b in names]
        if "exact" in names and len(names) > 1:
            other = [b for b in names if b != "exact"][0]
            cells += [f"{by[(h, k, p, other)].median_ms / by[(h, k, p, 'exact')].median_ms:.1f}x",
                      f"{by[(h, k, p, other)].agreement:.0%}"]
        table_rows.append(cells)
    print_table("p-best rescoring latency", cols, table_rows, caption=sig)
    return 0


# --------------------------------------------------------------------------- trace analyses
def _trace(path: Path) -> Any:
    from blockdraft.oracle import Trace

    return Trace.open(path)


def _sig_caption(trace: Any) -> str:
    return "signature: " + trace.signature_string()


def cmd_oracle(args: argparse.Namespace) -> int:
    from blockdraft.oracle import oracle_curve, plot_oracle_curve

    trace = _trace(args.trace)
    curve = oracle_curve(trace, ks=args.k)
    if args.plot:
        plot_oracle_curve(curve, args.plot)
    if args.json:
        print_json({"signature": dict(trace.signature), **curve.to_dict()})
        return 0
    print_table(
        f"oracle block efficiency ({trace.num_examples} examples, h={trace.h})",
        ["k", "B_oracle(k)", "B_oracle(k) / B"],
        [(int(k), float(b), float(r)) for k, b, r in
         zip(curve.ks, curve.b_oracle, curve.ratio, strict=True)],
        caption=f"vanilla B = {curve.b_vanilla:.3f}\n{_sig_caption(trace)}"
        + (f"\nplot: {args.plot}" if args.plot else ""),
    )
    return 0


def cmd_repetition(args: argparse.Namespace) -> int:
    from blockdraft.drafts.heads import HeadDrafter
    from blockdraft.oracle import repetition, simulate

    trace = _trace(args.trace)
    rows = [("vanilla", repetition(simulate(trace, HeadDrafter(k=1, p=1))))]
    if args.lm:
        from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

        lm = NgramLM(args.lm)
        lm.check_vocab(trace.V)
        drafter = HeadDrafter(k=min(args.k, trace.K), p=1,
                              rescorer=NgramRescorer(lm, alpha=args.alpha))
        rows.append((f"{lm.order}-gram rescored (k={drafter.k}, alpha={args.alpha})",
                     repetition(simulate(trace, drafter, progress=True))))
    if args.json:
        print_json({"signature": dict(trace.signature),
                    "rows": [{"drafts": n, **r.to_dict()} for n, r in rows]})
        return 0
    print_table(
        "consecutive repetition in drafts (visited steps)",
        ["drafts", "% consecutive", "mean max run", "% drafts with repetition", "steps"],
        [(n, r.pct_consecutive, r.mean_max_run, r.pct_with_repetition, r.num_steps)
         for n, r in rows],
        caption=_sig_caption(trace),
    )
    return 0


def cmd_entropy(args: argparse.Namespace) -> int:
    from blockdraft.drafts.heads import HeadDrafter
    from blockdraft.oracle import head_entropy, plot_entropy_densities, simulate

    trace = _trace(args.trace)
    visited = None if args.all_positions else simulate(trace, HeadDrafter(k=1, p=1))
    stats = head_entropy(trace, visited)
    if args.plot:
        plot_entropy_densities(stats, args.plot)
    if args.json:
        print_json({"signature": dict(trace.signature), "mean": stats.mean,
                    "h_max": stats.h_max, "positions": int(stats.entropy.shape[0])})
        return 0
    h = stats.mean.size
    q = (np.quantile(stats.entropy, [0.25, 0.5, 0.75], axis=0) if stats.entropy.size
         else np.full((3, h), np.nan))
    print_table(
        "head entropy (nats) over " + ("all positions" if args.all_positions
                                        else "the positions vanilla BPD visits"),
        ["head", "mean H", "25%", "median", "75%"],
        [(i + 1, float(stats.mean[i]), float(q[0, i]), float(q[1, i]), float(q[2, i]))
         for i in range(h)],
        caption=f"h_max = {stats.h_max}\n{_sig_caption(trace)}"
        + (f"\nplot: {args.plot}" if args.plot else ""),
    )
    return 0


# --------------------------------------------------------------------------- train / trace
def _read_texts(files: Sequence[str]) -> list[str]:
    out: list[str] = []
    for f in files:
        path = Path(f)
        if not path.is_file():
            raise CliError(f"corpus file {path} does not exist")
        out += [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not out:
        raise CliError("the corpus has no non-empty lines")
    return out


def cmd_train(args: argparse.Namespace) -> int:
    import torch

    from blockdraft.models import (
        BlockwiseConfig,
        BlockwiseLM,
        RescorerLM,
        Tokenizer,
        TrainConfig,
        load_model,
        load_tokenizer,
        save_model,
        train,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = ("h", "n_layer", "n_head", "d_model", "d_ff")
    if args.init is not None:
        given = [f"--{f.replace('_', '-')}" for f in sizes if getattr(args, f) is not None]
        if given or args.rescorer:
            raise CliError(
                f"--init {args.init} continues that model with its own config; drop "
                f"{', '.join(given + (['--rescorer'] if args.rescorer else []))}"
            )
    if args.distill and (args.init is None or args.mode != "heads"):
        raise CliError(
            "--distill trains the heads on the base model's own greedy outputs (Stern sec. "
            "6.2), so it needs a trained base: use --mode heads --init MODEL_DIR"
        )
    lines = _read_texts(args.corpus)
    if args.tokenizer:
        tok = Tokenizer.load(args.tokenizer)
    elif args.init is not None:
        tok = load_tokenizer(args.init)
    else:
        print(f"training a {args.vocab_size}-token BPE on {len(lines)} lines", file=sys.stderr)
        tok = Tokenizer.train(lines, vocab_size=args.vocab_size)
    ids = [i for line in tok.encode_batch(lines) for i in (*line, tok.eos_id)]
    stream = np.asarray(ids, dtype=np.int64)
    n_eval = int(stream.size * args.eval_fraction)
    train_ids, eval_ids = stream[: stream.size - n_eval], stream[stream.size - n_eval:]
    if args.init is not None:
        model = load_model(args.init, device=args.device)
        if model.config.vocab_size != tok.vocab_size:
            raise CliError(
                f"the tokenizer has {tok.vocab_size} tokens but the model in {args.init} has "
                f"V = {model.config.vocab_size}; use the model's own tokenizer"
            )
    else:
        overrides: dict[str, Any] = {"vocab_size": tok.vocab_size}
        if args.rescorer:
            overrides["h"] = 1
        elif args.h:
            overrides["h"] = args.h
        for field in sizes[1:]:
            if getattr(args, field) is not None:
                overrides[field] = getattr(args, field)
        config = BlockwiseConfig.preset(args.preset, **overrides)
        model = (RescorerLM if args.rescorer else BlockwiseLM)(config, device=args.device)
    if args.distill:
        train_ids = _distillation_stream(model, tok, lines, args)
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len,
                      lr=args.lr, checkpoint_interval=args.checkpoint_interval)
    mode: Any = "base" if args.rescorer else args.mode
    result = train(model, train_ids, cfg, eval_ids=eval_ids if n_eval else None, mode=mode,
                   seed=args.seed, checkpoint_dir=args.out, resume=args.resume, tokenizer=tok)
    save_model(model, args.out, tokenizer=tok, extra_meta={
        "train": {"mode": mode, "steps": result.steps, "seed": args.seed,
                  "corpus": [str(c) for c in args.corpus], "tokens": int(train_ids.size),
                  "init": None if args.init is None else str(args.init),
                  "distill": args.distill or None, "wall_s": result.wall_s,
                  "last_eval": dataclasses.asdict(result.evals[-1]) if result.evals else None}})
    if args.json:
        print_json({"out": args.out, "steps": result.steps, "final_loss": result.final_loss,
                    "tokens_per_s": result.tokens_per_s, "wall_s": result.wall_s})
        return 0
    rows = [("steps", result.steps), ("final training loss (nats)", result.final_loss),
            ("tokens/s", result.tokens_per_s), ("wall time (s)", result.wall_s)]
    if result.evals:
        last = result.evals[-1]
        rows += [(f"held-out loss head {i + 1} (nats)", float(x)) for i, x in
                 enumerate(last.loss)]
        rows += [(f"held-out top-1 head {i + 1}", float(x)) for i, x in
                 enumerate(last.accuracy)]
    print_table(f"trained {args.preset} {'RescorerLM' if args.rescorer else 'BlockwiseLM'}",
                ["", "value"], rows, caption=f"checkpoint: {args.out}")
    return 0


def _distillation_stream(model: Any, tok: Any, lines: list[str], args: argparse.Namespace
                         ) -> np.ndarray:
    """Sequence-level distillation data: ``args.distill`` corpus lines drawn with the seed,
    each cut to its first ``--distill-prompt-len`` tokens and continued greedily by the base
    model for ``--distill-len`` tokens (the lines of the held-out tail are never drawn)."""
    from blockdraft.models.train import distill_targets

    n_train_lines = len(lines) - max(1, int(len(lines) * args.eval_fraction))
    rng = np.random.default_rng(args.seed)
    prompts: list[list[int]] = []
    for i in rng.permutation(n_train_lines):
        ids = tok.encode(lines[int(i)])
        if len(ids) > args.distill_prompt_len:
            prompts.append([tok.eos_id, *ids[: args.distill_prompt_len]])
        if len(prompts) == args.distill:
            break
    if not prompts:
        raise CliError(
            f"no corpus line has more than --distill-prompt-len = {args.distill_prompt_len} "
            "tokens to prompt the base model with; lower it"
        )
    parts = [distill_targets(model, [p], args.distill_len, eos_id=tok.eos_id)
             for p in progress_bar(f"distilling {len(prompts)} greedy continuations")(prompts)]
    print(f"distillation: {len(prompts)} prompts -> {sum(x.size for x in parts)} tokens",
          file=sys.stderr)
    return np.concatenate(parts)


def cmd_trace(args: argparse.Namespace) -> int:
    from blockdraft.models import load_model, load_tokenizer
    from blockdraft.oracle.record import record_trace
    from blockdraft.signature import environment

    model = load_model(args.model, device=args.device)
    if args.ids:
        prompts = [p.tolist() for p in read_id_lines(Path(args.prompts))]
        eos = args.eos_id
    else:
        tok = load_tokenizer(args.model)
        lines = _read_texts([args.prompts])
        prompts = [tok.encode(line) for line in lines]
        eos = tok.eos_id if args.eos_id is None else args.eos_id
    sig = {"model": Path(args.model).name, "prompts": Path(args.prompts).name,
           "max_new_tokens": args.max_new_tokens, **environment(args.device)}
    trace = record_trace(model, prompts, args.output, max_new_tokens=args.max_new_tokens,
                         eos_id=eos, K=args.K, signature=sig, overwrite=args.overwrite,
                         progress=progress_bar("tracing"))
    print(f"wrote {args.output}: {trace.num_examples} examples, {trace.num_positions} "
          f"positions, h={trace.h}, K={trace.K}")
    return 0


def cmd_decode(args: argparse.Namespace) -> int:
    from blockdraft.models import greedy_generate, load_model, load_tokenizer
    from blockdraft.verify import Criterion, decode

    model = load_model(args.model, device=args.device)
    tok = load_tokenizer(args.model)
    prompt = tok.encode(args.prompt)
    rescorer: Any = None
    if args.lm:
        from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

        lm = NgramLM(args.lm)
        lm.check_vocab(tok.vocab_size)
        rescorer = NgramRescorer(lm, alpha=args.alpha)
    elif args.rescorer_model:
        from blockdraft.rescorers.neural import NeuralRescorer

        rescorer = NeuralRescorer(str(args.rescorer_model), alpha=args.alpha,
                                  backend=args.neural_backend)
    criterion = Criterion.parse(args.criterion)
    res = decode(model, prompt, rescorer=rescorer, k=args.k, p=args.p, criterion=criterion,
                 max_new_tokens=args.max_new_tokens, eos_id=tok.eos_id, device=args.device,
                 iad=args.iad)
    assert not isinstance(res, list)
    greedy_s = None
    if args.compare_greedy:
        import time

        t0 = time.perf_counter()
        ref = greedy_generate(model, prompt, args.max_new_tokens, eos_id=tok.eos_id)
        greedy_s = time.perf_counter() - t0
        if criterion.lossless and ref != res.tokens:
            raise CliError("lossless decoding differs from greedy decoding (a bug: report it)")
    text = tok.decode(res.tokens)
    if args.json:
        print_json({"text": text, "tokens": res.tokens, "block_efficiency": res.block_efficiency,
                    "calls": res.calls, "wall_s": res.wall_s, "forward_s": res.forward_s,
                    "draft_s": res.draft_s, "greedy_s": greedy_s, "criterion": str(criterion),
                    "drafter": res.drafter, "stopped": res.stopped})
        return 0
    print(text)
    rows: list[tuple[str, object]] = [
        ("drafter", res.drafter), ("criterion", str(criterion)),
        ("tokens", len(res.tokens)), ("serial calls", res.calls),
        ("block efficiency B", res.block_efficiency), ("wall s", res.wall_s),
        ("  in model forwards", res.forward_s), ("  in drafting / rescoring", res.draft_s),
    ]
    if greedy_s is not None:
        rows += [("greedy wall s", greedy_s), ("speedup over greedy", greedy_s / res.wall_s)]
    print_table("decode", ["", "value"], rows)
    return 0


# --------------------------------------------------------------------------- demo
def cmd_demo(args: argparse.Namespace) -> int:
    from blockdraft.demo import run_demo

    def log(msg: str) -> None:
        print(f"[demo] {msg}", file=sys.stderr, flush=True)

    res = run_demo(args.corpus, args.out, num_examples=args.examples, seed=args.seed,
                   stop_at_eos=args.stop_at_eos, threads=args.threads,
                   progress=sys.stderr.isatty(), log=log)
    if args.json:
        print_json(res.to_dict())
        return 0
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
    return 0


# --------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="blockdraft",
        description="Refine the block drafts of blockwise parallel decoding.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_: str, func: Callable[[argparse.Namespace], int],
            parent: Any = sub) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=func)
        return p

    p = add("oracle", "oracle block efficiency B_oracle(k) and B_oracle(k)/B", cmd_oracle)
    p.add_argument("trace", type=Path, help="trace directory")
    p.add_argument("--k", type=int_list, default=[1, 2, 4, 8, 16],
                   help="lattice widths (default 1,2,4,8,16; the trace's K is added)")
    p.add_argument("--plot", type=Path, default=None, help="write the curve as a PNG")
    p.add_argument("--json", action="store_true")

    p = add("repetition", "consecutive repetition in drafts, vanilla vs n-gram rescored",
            cmd_repetition)
    p.add_argument("trace", type=Path, help="trace directory")
    p.add_argument("--lm", type=Path, default=None,
                   help="an n-gram LM: also report the 1-best of the rescored lattice")
    p.add_argument("--k", type=int, default=16, help="lattice width for rescoring (default 16)")
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--json", action="store_true")

    p = add("entropy", "head entropies, their means and h_max", cmd_entropy)
    p.add_argument("trace", type=Path, help="trace directory")
    p.add_argument("--all-positions", action="store_true",
                   help="every position, not only those vanilla BPD visits")
    p.add_argument("--plot", type=Path, default=None, help="write densities per head as a PNG")
    p.add_argument("--json", action="store_true")

    p = add("train", "train a BlockwiseLM (or a RescorerLM) and its BPE tokenizer", cmd_train)
    p.add_argument("--corpus", nargs="+", required=True, help="text files, one document a line")
    p.add_argument("-o", "--out", required=True, type=Path, help="checkpoint directory")
    p.add_argument("--preset", default="small", choices=["tiny", "small", "base"])
    p.add_argument("--h", type=int, default=None, help="prediction heads (default: preset's)")
    p.add_argument("--rescorer", action="store_true",
                   help="train a RescorerLM (h = 1) for local neural rescoring")
    p.add_argument("--mode", default="base-then-heads",
                   choices=["joint", "heads", "base", "base-then-heads"],
                   help="joint (Kim App. C.1), heads on a frozen base (Stern), base only, or "
                        "base then heads (default)")
    p.add_argument("--tokenizer", type=Path, default=None,
                   help="reuse a tokenizer (tokenizer.json or GPT-2 files) instead of training")
    p.add_argument("--init", type=Path, default=None,
                   help="start from this trained model directory (its config and tokenizer)")
    p.add_argument("--distill", type=int, default=0, metavar="N",
                   help="with --mode heads --init: train the heads on the base model's greedy "
                        "continuations of N corpus prompts (Stern sec. 6.2)")
    p.add_argument("--distill-len", type=int, default=64,
                   help="greedy tokens per distillation prompt (default 64)")
    p.add_argument("--distill-prompt-len", type=int, default=32,
                   help="corpus tokens per distillation prompt (default 32)")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--n-layer", type=int, default=None, help="transformer blocks (preset's)")
    p.add_argument("--n-head", type=int, default=None, help="attention heads (preset's)")
    p.add_argument("--d-model", type=int, default=None, help="residual width (preset's)")
    p.add_argument("--d-ff", type=int, default=None, help="MLP hidden width (preset's)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-fraction", type=float, default=0.01,
                   help="tail of the corpus held out for evaluation (default 0.01)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--checkpoint-interval", type=int, default=200,
                   help="steps between resumable checkpoints (0: only at the end; default 200)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true")

    p = add("trace", "greedy-decode prompts and record a trace (SPEC sec. 6)", cmd_trace)
    p.add_argument("--model", required=True, type=Path, help="checkpoint directory")
    p.add_argument("--prompts", required=True, type=Path,
                   help="one prompt per line (text, or token ids with --ids)")
    p.add_argument("-o", "--output", required=True, type=Path, help="trace directory")
    p.add_argument("--ids", action="store_true", help="prompts are token ids")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--eos-id", type=int, default=None,
                   help="end-of-text id (default: the tokenizer's)")
    p.add_argument("--K", type=int, default=16, help="top-K kept per head (default 16)")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--device", default="cpu")

    p = add("decode", "decode a prompt with blockwise parallel decoding", cmd_decode)
    p.add_argument("--model", required=True, type=Path, help="checkpoint directory")
    p.add_argument("--prompt", required=True, help="prompt text")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--k", type=int, default=16, help="lattice width (default 16)")
    p.add_argument("--p", type=int, default=1, help="drafts verified per step (default 1)")
    p.add_argument("--lm", type=Path, default=None, help="n-gram LM for global rescoring")
    p.add_argument("--rescorer-model", type=Path, default=None,
                   help="RescorerLM checkpoint for local neural rescoring")
    p.add_argument("--neural-backend", choices=["torch", "onnx"], default="onnx")
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--criterion", default="exact",
                   help='acceptance criterion, e.g. "exact", "topk:k=4", "gad++:beta=5,tau=3"')
    p.add_argument("--iad", action="store_true", help="add an input-guided draft")
    p.add_argument("--compare-greedy", action="store_true",
                   help="also time plain greedy decoding (and check losslessness)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true")

    p = add("demo", "train a small blockwise model on a corpus (default: Python's own docs), "
            "decode held-out prompts with every drafting strategy, print B", cmd_demo)
    p.add_argument("--corpus", type=Path, default=None,
                   help="a text file (default: pydoc_data.topics, shipped with Python)")
    p.add_argument("--out", type=Path, default=Path("demo-output"),
                   help="where the lattice drawing, trace and demo.json go "
                        "(default ./demo-output)")
    p.add_argument("--examples", type=int, default=8, help="held-out prompts (default 8)")
    p.add_argument("--seed", type=int, default=0,
                   help="the split and the training (part of the cache key; default 0)")
    p.add_argument("--stop-at-eos", action="store_true",
                   help="stop each decode at EOS (default: EOS is a paragraph separator and "
                        "every prompt gets 48 new tokens)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: the cores not already busy)")
    p.add_argument("--json", action="store_true")

    p = add("rescore", "the p best drafts of a lattice file under an n-gram LM", cmd_rescore)
    p.add_argument("lattice", type=Path, help="lattice file (blockdraft.lattice JSON)")
    p.add_argument("--lm", required=True, type=Path, help="ARPA file or KenLM binary")
    p.add_argument("--p", type=int, default=16, help="drafts wanted (default 16)")
    p.add_argument("--alpha", type=float, default=1.0, help="LM weight (default 1.0)")
    p.add_argument("--backend", choices=["exact", "wfst"], default="exact")
    p.add_argument("--context", type=id_list, default=None,
                   help="comma-separated context token ids (default: the file's context)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    lat = sub.add_parser("lattice", help="lattice tools").add_subparsers(
        dest="lattice_command", required=True, metavar="ACTION")
    p = add("draw", "draw a lattice like Kim et al. Fig. 4", cmd_lattice_draw, lat)
    p.add_argument("lattice", type=Path)
    p.add_argument("-o", "--output", required=True, type=Path,
                   help="output file: .dot, .svg, .png or .pdf")
    p.add_argument("--reference", type=id_list, default=None,
                   help="comma-separated token ids of a path to highlight (default: the "
                        "file's reference)")
    p.add_argument("--tokenizer", type=Path, default=None, help="label arcs with token text")

    ng = sub.add_parser("ngram", help="n-gram LM tools").add_subparsers(
        dest="ngram_command", required=True, metavar="ACTION")
    p = add("train", "train an n-gram LM over token ids (lmplz + build_binary)",
            cmd_ngram_train, ng)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", nargs="+", help="text files, one document per line")
    src.add_argument("--ids", nargs="+", help="files of whitespace-separated token ids")
    p.add_argument("--tokenizer", type=Path, help="tokenizer.json or a GPT-2 vocab/merges dir")
    p.add_argument("--order", type=int, default=4, help="n-gram order, 2 to 5 (default 4)")
    p.add_argument("-o", "--output", required=True, type=Path,
                   help="output prefix: writes PREFIX.arpa and PREFIX.bin")
    p.add_argument("--prune", type=int, nargs="+", default=None,
                   help="lmplz --prune thresholds per order, e.g. 0 0 1 1")
    p.add_argument("--memory", default="1G", help="lmplz memory cap -S (default 1G)")
    p.add_argument("--no-binary", action="store_true", help="skip build_binary")
    p.add_argument("--json", action="store_true")

    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(
        dest="bench_command", required=True, metavar="ACTION")
    p = add("rescore", "p-best latency of the rescoring backends, side by side",
            cmd_bench_rescore, bench)
    p.add_argument("--lm", required=True, type=Path, help="ARPA file or KenLM binary")
    p.add_argument("--arpa", type=Path, default=None,
                   help="the ARPA file for the wfst backend when --lm is a binary")
    p.add_argument("--h", type=int_list, default=[4, 8, 16], help="slots (default 4,8,16)")
    p.add_argument("--k", type=int_list, default=[2, 4, 8, 16], help="arcs (default 2,4,8,16)")
    p.add_argument("--p", type=int_list, default=[1, 2, 4, 8, 16],
                   help="drafts (default 1,2,4,8,16)")
    p.add_argument("--kind", choices=["hits", "random"], default="random",
                   help="hits: true held-out tokens among frequency-drawn distractors "
                        "(needs --heldout); random: uniformly random tokens")
    p.add_argument("--heldout", type=Path, default=None,
                   help="held-out token ids (whitespace-separated) for --kind hits")
    p.add_argument("--backends", default="exact,wfst", help="comma-separated (default exact,wfst)")
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--n", type=int, default=100, help="lattices per (h, k) (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 error, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # e.g. `blockdraft ... --json | head`
        sys.stderr.close()
        return 0
    except BlockdraftError as e:
        print(f"blockdraft: error: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"blockdraft: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
