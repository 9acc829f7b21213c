"""``blockdraft heads``: Medusa heads for a Hugging Face base model, by self-distillation on a
frozen base (docs/definitions.md sec. 10; docs/real-models.md, "Training heads").

    heads prompts   distillation prompts that look like what users ask: kinds of requests
                    mixed by declared weights over the shared data (``<out>.mix.json`` records
                    the mix)
    heads questions questions the base writes about passages of the corpora (self-instruct)
    heads follow-ups  multi-turn prompts: a training prompt, the base's answer (from a
                    distillation set) and a follow-up request
    heads distill   the base's greedy answers and final hidden states on training prompts: a
                    distillation set, cached and resumable (a run stops between shards)
    heads label     a distillation set's texts labelled by one forward each (the base's
                    states and its own next tokens, at prefill speed): a labelled set that
                    mirrors the source shard for shard, resumable
    heads train     the data step (or the set it left), then the heads, written in Medusa
                    version-2 layout with their learning curve and a README
    heads curve     trained heads scored on every held-out position of a set, against their
                    amount of training data (``data_curve.{json,md,png}``)
    heads package   the heads with what they draft with: a shortlist (the draft vocabulary,
                    counted on a set's training answers) and a drafting recipe (an n-gram LM,
                    acceptance tables, tuned settings), so ``decode(model, ids)`` uses them

``blockdraft train --mode medusa`` runs ``heads train`` (:func:`train_namespace`,
:func:`cmd_heads_train`). Every output follows the one rule of
:func:`blockdraft.core.outputs.claim_output`: an existing target is refused unless
``--overwrite`` (or, where the work can go on, ``--resume``), a folder of files the command
does not write is refused, naming them, and what is written appears complete or not at all:
under ``--overwrite`` the old output stays until a complete new one replaces it (a run stopped
by ``--minutes``, ``--max-tokens`` or ``--max-prompts`` leaves it as it was). A new or
continued output that such a limit stopped early is kept, and the command exits with 3. The
working folders (``--folder``/``--data``, ``--work``) are only ever continued with the settings
that made them, and a folder of other files is refused.
"""

from __future__ import annotations

import argparse
import inspect
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from blockdraft.cli.common import (
    JSON_HELP,
    CliError,
    add_command,
    add_group,
    positive_int,
    print_json,
    print_table,
    stopped_early,
)
from blockdraft.core.outputs import claim_output

DTYPES = ("float32", "bfloat16", "float16")


def _default(function: Callable[..., Any], name: str) -> Any:
    """The default of ``function``'s parameter ``name``: the library's defaults are the CLI's."""
    return inspect.signature(function).parameters[name].default


def _command(args: argparse.Namespace) -> str:
    """The command line as typed (:func:`blockdraft.cli.main` records it), for the records a
    run writes."""
    return str(getattr(args, "command_line", "") or "blockdraft " + shlex.join(sys.argv[1:]))


def _threads(args: argparse.Namespace) -> None:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


# ---------------------------------------------------------------------------------- distill


def cmd_heads_distill(args: argparse.Namespace) -> int:
    from blockdraft.training import heads

    def run(folder: Path | None) -> Any:
        return heads.distill(
            args.base, [str(p) for p in args.prompts], folder=folder, dtype=args.dtype,
            max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
            shard_size=args.shard_size, seed=args.seed, heldout_fraction=args.heldout_fraction,
            heldout_min=args.heldout_min, max_prompts=args.max_prompts,
            max_tokens=args.max_tokens, minutes=args.minutes, threads=args.threads,
            reverse=args.reverse, ray=args.ray, workers=args.workers)

    return _write_set(args, run, lambda dset: bool(dset.complete), "a distillation set",
                      "is partial")


def _write_set(args: argparse.Namespace, run: Callable[[Path | None], Any],
               complete: Callable[[Any], bool], what: str, partial: str) -> int:
    """A distillation or labelled set made by ``run(folder)``: in the cache's folder (keyed by
    the settings, always continued) or in ``--folder`` under the output rule (``--resume`` to
    continue, ``--overwrite`` to replace once complete); its table on stdout; exit 3 when a
    limit stopped it before ``complete``."""
    from blockdraft.training import heads

    if args.folder is None:  # the cache's folder, keyed by the settings: always continued
        if args.overwrite or args.resume:
            raise CliError("--overwrite and --resume apply to a --folder; the default folder "
                           "in the cache is keyed by the settings and always continued")
        dset = run(None)
        _report_distill(args, dset)
        if complete(dset):
            return 0
        return stopped_early(f"{_distill_stop(args, dset)}: {what} in {dset.folder} {partial}; "
                             "the same command goes on from there")
    if args.resume:
        heads.check_distill_folder(args.folder)  # a folder of other files: not a set
    output = claim_output(args.folder, what=what, error=CliError, overwrite=args.overwrite,
                          resume=args.resume, flag="--folder", own=heads.SET_FILES)
    with output.writing() as writing:  # --overwrite: built beside it, swapped in if complete
        dset = run(writing.path)
        if not complete(dset):
            writing.stopped(_distill_stop(args, dset))
    _report_distill(args, heads.open_distill_set(output.path))  # where it lies now
    return 0 if writing.complete else stopped_early(writing.partial_message())


def _distill_stop(args: argparse.Namespace, dset: Any) -> str:
    """Where a distillation run stopped: its limits and the shards done."""
    limits = [f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"
              for flag, value in (("--max-prompts", getattr(args, "max_prompts", None)),
                                  ("--max-tokens", args.max_tokens),
                                  ("--minutes", args.minutes)) if value is not None]
    return (f"stopped by {' / '.join(limits) or 'a limit'} after {len(dset.done)} of "
            f"{len(dset.plan['shards'])} shards")


def _report_distill(args: argparse.Namespace, dset: Any) -> None:
    """The set's table (or JSON) on stdout."""
    summary = dset.summary()
    done, planned = len(dset.done), len(dset.plan["shards"])
    if args.json:
        print_json({"folder": str(dset.folder), **summary, "shards_done": done,
                    "shards_planned": planned, "complete": dset.complete})
        return
    print_table("distillation set", ["", "value"], [
        ("shards done", f"{done} of {planned}"),
        ("training prompts", summary["train_prompts"]),
        ("training answer tokens", summary["train_tokens"]),
        ("held-out prompts", summary["heldout_prompts"]),
        ("held-out answer tokens", summary["heldout_tokens"]),
    ], caption=f"folder: {dset.folder}")


# ------------------------------------------------------------------------------------ label


def cmd_heads_label(args: argparse.Namespace) -> int:
    """``heads label``: the source set's finished shards labelled into a labelled set (the
    cache's folder keyed by the settings, or ``--folder``), continued on every run."""
    from blockdraft.training import heads
    from blockdraft.training.heads.labels import label

    source = heads.open_distill_set(args.source)

    def run(folder: Path | None) -> Any:
        return label(args.source, args.base, folder=folder, dtype=args.dtype,
                     batch_size=args.batch_size, max_tokens=args.max_tokens,
                     minutes=args.minutes, threads=args.threads, progress=not args.json)

    def complete(dset: Any) -> bool:
        return set(dset.done) >= set(source.done)

    return _write_set(args, run, complete, "a labelled set",
                      "lacks some of the source's shards")


def _data_arguments(p: argparse.ArgumentParser, prompts_required: bool = True) -> None:
    """The data step's options, shared by ``heads distill`` and ``heads train``."""
    from blockdraft.training.heads.distill import distill

    p.add_argument("--base", default="smollm2",
                   help="the base model: a known name (smollm2), a Hugging Face folder or a "
                        ".gguf file (default smollm2)")
    p.add_argument("--prompts", nargs="+", required=prompts_required, type=Path,
                   help='JSON-lines files of training prompts, {"source": ..., "prompt": ...} '
                        "a line (training data only, never evaluation text)"
                        + ("" if prompts_required else "; not needed when --data holds a "
                           "labelled set (heads label)"))
    p.add_argument("--dtype", choices=DTYPES, default=_default(distill, "dtype"),
                   help="the base's dtype while generating (default %(default)s)")
    p.add_argument("--max-new-tokens", type=positive_int,
                   default=_default(distill, "max_new_tokens"),
                   help="answer length cap, tokens (default %(default)s)")
    p.add_argument("--batch-size", type=positive_int, default=_default(distill, "batch_size"),
                   help="prompts generated together (default %(default)s)")
    p.add_argument("--shard-size", type=positive_int, default=_default(distill, "shard_size"),
                   help="prompts per data shard (default %(default)s)")
    p.add_argument("--heldout-fraction", type=float,
                   default=_default(distill, "heldout_fraction"),
                   help="share of the prompts held out for evaluation (default %(default)s)")
    p.add_argument("--heldout-min", type=int, default=_default(distill, "heldout_min"),
                   help="at least this many prompts held out (default %(default)s)")
    p.add_argument("--max-prompts", type=positive_int, default=None,
                   help="training prompts to distil (default: all)")
    p.add_argument("--seed", type=int, default=0,
                   help="seeds the held-out split (and, for heads train, the heads)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads (default: 1 when the machine is busy, else every core)")


# ------------------------------------------------------------------------------------ train


def heads_settings(args: argparse.Namespace) -> Any:
    """The :class:`~blockdraft.training.heads.HeadsTrainSettings` of ``heads train``'s
    arguments, checked."""
    from blockdraft.training.heads import HeadsTrainSettings

    settings = HeadsTrainSettings(
        heads=args.heads, layers=args.layers, seed=args.seed, steps=args.steps,
        batch=args.batch, lr=args.lr, warmup=args.warmup, schedule=args.schedule,
        loss=args.loss, eval_every=args.eval_every, eval_positions=args.eval_positions,
        patience=args.patience, vocab=args.vocab, shortlist=args.shortlist, arch=args.arch)
    settings.check()
    return settings


def cmd_heads_train(args: argparse.Namespace) -> int:
    """``heads train`` (and ``train --mode medusa``, through :func:`train_namespace`)."""
    from blockdraft.training import heads

    settings = heads_settings(args)
    if not args.prompts and not (args.data is not None and (args.data / "plan.json").is_file()
                                 and heads.open_distill_set(args.data).labelled):
        raise CliError("heads train needs --prompts (the data step distils them), unless "
                       "--data holds a labelled set (blockdraft heads label)")
    out = Path(args.out)
    if (args.resume and not args.overwrite and out.is_dir() and any(out.iterdir())
            and not (out / heads.CURVE_FILE).is_file()):
        raise CliError(f"-o {out} holds no heads written by blockdraft heads train (no "
                       f"{heads.CURVE_FILE}), so there is no run to continue; pass --overwrite "
                       "to replace it, or choose a new path")
    output = claim_output(out, what="Medusa heads", error=CliError, overwrite=args.overwrite,
                          resume=args.resume, own=heads.HEADS_FILES)
    if args.data is not None:
        heads.check_distill_folder(args.data)
    if args.work is not None:
        heads.check_training_folder(args.work)
    # the heads are written only at the end, complete; under --overwrite they replace -o
    # only when the training finished (an interrupted, failed or time-boxed run leaves it)
    with output.writing() as writing:
        result = heads.train_medusa_heads(
            args.base, [str(p) for p in args.prompts or ()], writing.path,
            heads=settings.heads, layers=settings.layers, max_prompts=args.max_prompts,
            train_tokens=args.train_tokens, minutes=args.minutes,
            distill_minutes=args.distill_minutes, seed=settings.seed, threads=args.threads,
            dtype=args.dtype, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
            shard_size=args.shard_size, heldout_fraction=args.heldout_fraction,
            heldout_min=args.heldout_min, data=args.data, work=args.work, settings=settings,
            command=_command(args), progress=not args.json, init=args.init)
        if not result.finished:
            limit = "a limit" if args.minutes is None else f"--minutes {args.minutes:g}"
            writing.stopped(f"the training stopped by {limit} at step {result.step} of "
                            f"{settings.steps} (these heads are those of step "
                            f"{result.best_step})")
    last = result.curve[-1] if result.curve else None
    if args.json:
        print_json({"out": str(out), "step": result.step, "finished": result.finished,
                    "best_step": result.best_step, "last": last})
    else:
        rows: list[tuple[str, object]] = [("steps", result.step), ("finished", result.finished),
                                          ("heads of the evaluation at step", result.best_step)]
        if last:
            rows += [(str(key), value) for key, value in last.items()
                     if isinstance(value, (int, float, str))]
            rows += [(f"held-out top-1, head {i + 2}", float(v))
                     for i, v in enumerate(last.get("top1", ()))]
        print_table(f"trained {settings.heads} Medusa heads on {args.base}", ["", "value"],
                    rows, caption=f"heads: {out}")
    return 0 if writing.complete else stopped_early(writing.partial_message())


def _train_arguments(p: argparse.ArgumentParser) -> None:
    """``heads train``'s arguments (all of them: :func:`train_namespace` reads the defaults)."""
    from blockdraft.training.heads import HeadsTrainSettings

    defaults = HeadsTrainSettings()
    _data_arguments(p, prompts_required=False)
    p.add_argument("-o", "--out", required=True, type=Path,
                   help="the heads folder to write (Medusa version-2 layout, bfloat16, "
                        "curve.json, curve.png, README.md)")
    p.add_argument("--heads", type=positive_int, default=defaults.heads,
                   help="Medusa heads (blockdraft heads 2..n+1, so h = n + 1; default "
                        "%(default)s)")
    p.add_argument("--layers", type=positive_int, default=defaults.layers,
                   help="ResBlocks per head (default %(default)s)")
    p.add_argument("--distill-minutes", type=float, default=None,
                   help="time box of the data step, minutes (0: only read the set as it is)")
    p.add_argument("--minutes", type=float, default=None,
                   help="time box of the training, minutes (a later run with --resume goes on)")
    p.add_argument("--arch", choices=("medusa", "prefix"), default=defaults.arch,
                   help="medusa: independent heads; prefix: each head also reads the token "
                        "before its target (Hydra-style: their lattice is a tree)")
    p.add_argument("--init", type=Path, default=None, metavar="HEADS_DIR",
                   help="start from these heads (a warm start: another epoch, new data; the "
                        "same --arch, --heads and --layers) instead of a random start")
    p.add_argument("--train-tokens", type=positive_int, default=None,
                   help="train on the first training shards holding this many answer tokens "
                        "(a learning curve's point; default: all the set holds)")
    p.add_argument("--steps", type=positive_int, default=defaults.steps,
                   help="optimizer steps, the cosine schedule's length (default %(default)s)")
    p.add_argument("--batch", type=positive_int, default=defaults.batch,
                   help="positions per step (default %(default)s)")
    p.add_argument("--lr", type=float, default=defaults.lr,
                   help="peak learning rate (default %(default)s)")
    p.add_argument("--warmup", type=int, default=defaults.warmup,
                   help="linear warm-up steps (default %(default)s)")
    p.add_argument("--schedule", choices=("cosine", "constant"), default=defaults.schedule)
    p.add_argument("--loss", choices=("ce", "kl"), default=defaults.loss,
                   help="ce: the base's greedy tokens; kl: its distributions")
    p.add_argument("--vocab", choices=("full", "seen", "shortlist"), default=defaults.vocab,
                   help="softmax of the training loss over the full vocabulary, only the "
                        "tokens seen in the training answers (several times faster), or the "
                        "--shortlist most frequent of them: the draft vocabulary of heads "
                        "packaged with that shortlist (faster still)")
    p.add_argument("--shortlist", type=positive_int, default=defaults.shortlist,
                   help="the training shortlist's size, with --vocab shortlist "
                        "(default %(default)s; package the heads with the same size)")
    p.add_argument("--eval-every", type=positive_int, default=defaults.eval_every,
                   help="steps between held-out evaluations and checkpoints "
                        "(default %(default)s)")
    p.add_argument("--eval-positions", type=positive_int, default=defaults.eval_positions,
                   help="held-out positions scored per evaluation (default %(default)s)")
    p.add_argument("--patience", type=int, default=defaults.patience,
                   help="stop after this many evaluations without progress (0: never)")
    p.add_argument("--data", type=Path, default=None,
                   help="the distillation folder (default: $BLOCKDRAFT_CACHE/distill/<key>)")
    p.add_argument("--work", type=Path, default=None,
                   help="the training folder, its checkpoint (default: "
                        "$BLOCKDRAFT_CACHE/medusa-train/<key>)")
    p.add_argument("--resume", action="store_true",
                   help="-o holds heads of an earlier run: continue its training (from the "
                        "checkpoint in the training folder) and replace them")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what -o holds (only once the new heads are complete)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)


def train_namespace(**given: Any) -> argparse.Namespace:
    """``heads train``'s arguments with their defaults, ``given`` set over them (what
    ``blockdraft train --mode medusa`` runs :func:`cmd_heads_train` with)."""
    parser = argparse.ArgumentParser(add_help=False)
    _train_arguments(parser)
    args = parser.parse_args(["--prompts", "-", "-o", "-"])
    unknown = sorted(set(given) - set(vars(args)) - {"command_line"})
    if unknown:
        raise TypeError(f"heads train has no arguments {unknown}")
    vars(args).update(given)
    return args


# ------------------------------------------------------------------------------------ curve


def cmd_heads_curve(args: argparse.Namespace) -> int:
    from blockdraft.training import heads

    out = Path(args.out)
    output = claim_output(out, what="a data curve", error=CliError, overwrite=args.overwrite,
                          own=heads.CURVE_FILES)
    runs = [heads.read_run(p) for p in args.runs]
    dset = heads.open_distill_set(args.data)
    _threads(args)
    from blockdraft.models.hf.loading import load_causal_lm

    model, _ = load_causal_lm(args.base, "float32")
    lm_head = heads.lm_head_weight(model)
    embed = model.get_input_embeddings().weight.detach().float().clone()  # prefix heads read it
    del model
    rows = heads.score_runs(runs, dset, lm_head, embed=embed)
    with output.writing() as writing:
        heads.write_data_curve(rows, writing.path, command=_command(args))
    if args.json:
        print_json({"out": str(out), "runs": rows})
        return 0
    print_table("Medusa heads: held-out accuracy against training data",
                ["training answer tokens", "prompts", "step", "mean top-1", "vanilla B",
                 "oracle(5) B"],
                [(r["tokens"], r["prompts"], r["step"], r["mean_top1"], r["B_vanilla"],
                  r["B_oracle5"]) for r in rows],
                caption=f"data_curve.{{json,md,png}}: {out}")
    return 0


# ---------------------------------------------------------------------------------- package


PACKAGE_FILES = ("config.json", "medusa_lm_head.safetensors", "shortlist.safetensors",
                 "acceptance.json", "ngram", "README.md", "curve.json", "curve.png")
"""What ``heads package`` writes in its folder."""


def cmd_heads_package(args: argparse.Namespace) -> int:
    import json

    from blockdraft.training import heads
    from blockdraft.training.heads.package import package_heads
    from blockdraft.training.heads.shortlist import (
        frequency_shortlist,
        shortlist_record,
        token_counts,
    )

    out = Path(args.out)
    output = claim_output(out, what="heads", error=CliError, overwrite=args.overwrite,
                          own=PACKAGE_FILES)
    recipe = None
    if args.recipe is not None:
        try:
            recipe = json.loads(Path(args.recipe).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise CliError(f"cannot read the recipe {args.recipe}: {e}") from e
        if not isinstance(recipe, dict):
            raise CliError(f"{args.recipe} must hold a JSON object of recipe settings")
    ids = info = None
    if args.shortlist:
        if args.data is None:
            raise CliError("--shortlist counts the tokens of a distillation set's training "
                           "answers: pass it with --data")
        from blockdraft.models import load_tokenizer
        from blockdraft.models.hf.formats import read_heads_config

        dset = heads.open_distill_set(args.data)
        base = read_heads_config(args.heads).base_model or "smollm2"
        tok = load_tokenizer(base)
        counts = token_counts(dset.answers("train"), int(tok.vocab_size))
        if not counts.sum():
            raise CliError(f"{args.data} holds no training answers yet: distil some first")
        eos = [int(tok.eos_id)] if tok.eos_id is not None else []
        try:
            ids = frequency_shortlist(counts, args.shortlist, always=eos)
        except Exception as e:  # a TrainingError naming the size
            raise CliError(str(e)) from e
        info = shortlist_record(counts, ids, counted_on=Path(args.data).name,
                                command=_command(args))
    with output.writing() as writing:
        package_heads(args.heads, writing.path, shortlist=ids, shortlist_info=info,
                      ngram=args.ngram, acceptance=args.acceptance, recipe=recipe)
    summary = {"out": str(out), "shortlist": None if ids is None else int(ids.size),
               "coverage": None if info is None else info["coverage"],
               "ngram": None if args.ngram is None else str(args.ngram),
               "acceptance": None if args.acceptance is None else str(args.acceptance),
               "recipe": recipe}
    if args.json:
        print_json(summary)
        return 0
    print_table(f"packaged heads: {out}", ["part", "value"],
                [(k, "-" if v is None else str(v)) for k, v in summary.items() if k != "out"])
    return 0


def _prompt_output(args: argparse.Namespace) -> Any:
    """``-o``, a prompt file, and its record beside it (``.mix.json``): claimed before any
    work (:func:`~blockdraft.core.outputs.claim_output`)."""
    from blockdraft.training.heads.mix import MIX_SUFFIX

    return claim_output(args.out, what="a prompt file", error=CliError,
                        overwrite=args.overwrite, folder=False, sidecars=(MIX_SUFFIX,))


def cmd_heads_prompts(args: argparse.Namespace) -> int:
    from blockdraft.training.heads.mix import DEFAULT_WEIGHTS, build_mix, write_mix

    out = Path(args.out)
    output = _prompt_output(args)
    weights = dict(DEFAULT_WEIGHTS)
    if args.weights:
        weights = {k: 0.0 for k in weights}
        for part in args.weights.split(","):
            kind, _, value = part.partition("=")
            try:
                weights[kind.strip()] = float(value)
            except ValueError:
                raise CliError(f"--weights {part!r}: expected KIND=NUMBER (kinds: "
                               f"{', '.join(DEFAULT_WEIGHTS)})") from None
    prompts, record = build_mix(args.data, args.n, weights, seed=args.seed)
    record["command"] = _command(args)
    with output.writing() as writing:  # the file and its record, renamed in together
        meta = writing.final(write_mix(writing.path, prompts, record))
    if args.json:
        print_json({"out": str(out), "record": str(meta), **record})
        return 0
    print_table(f"{len(prompts)} prompts: {out}", ["kind", "weight", "prompts"],
                [(k, f"{record['weights'][k]:.2f}", record["counts"][k])
                 for k in record["counts"]],
                caption=f"{record['distinct']} distinct; the mix: {meta}")
    return 0


def _write_prompts(args: argparse.Namespace, output: Any, prompts: list[dict[str, Any]],
                   record: dict[str, Any], kind: str) -> int:
    """Write a prompt file and its record (as ``heads prompts`` does) and report them."""
    from blockdraft.training.heads.mix import write_mix

    record["command"] = _command(args)
    with output.writing() as writing:
        meta = writing.final(write_mix(writing.path, prompts, record))
    if args.json:
        print_json({"out": str(args.out), "record": str(meta), **record})
        return 0
    print_table(f"{len(prompts)} {kind}: {args.out}", ["source", "prompts"],
                sorted(record["origins"].items()), caption=f"the record: {meta}")
    return 0


def cmd_heads_followups(args: argparse.Namespace) -> int:
    from blockdraft.models.hf.loading import resolve_base
    from blockdraft.models.hf.tokenizer import load_hf_tokenizer
    from blockdraft.training.heads.followups import build_followups

    output = _prompt_output(args)
    tokenizer = load_hf_tokenizer(resolve_base(args.base)).backend  # not the weights
    prompts, record = build_followups(args.distill, [str(p) for p in args.prompts], tokenizer,
                                      args.n, seed=args.seed,
                                      min_answer_tokens=args.min_answer_tokens)
    return _write_prompts(args, output, prompts, record, "follow-up conversations")


def cmd_heads_questions(args: argparse.Namespace) -> int:
    from blockdraft.training.heads.questions import self_instruct

    output = _prompt_output(args)
    prompts, record = self_instruct(
        args.base, args.data, args.n, seed=args.seed, dtype=args.dtype,
        batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
        oversample=args.oversample, threads=args.threads)
    if not prompts:
        raise CliError(f"the base wrote no usable question in {record['generation']['asked']} "
                       "answers; nothing written")
    return _write_prompts(args, output, prompts, record, "questions")


# ------------------------------------------------------------------------------------ parser


def _prompt_file_arguments(p: argparse.ArgumentParser) -> None:
    """The options every command that writes a prompt file shares."""
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--out", type=Path, required=True,
                   help="the prompt file (JSON lines; its record beside it as .mix.json)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--json", action="store_true", help=JSON_HELP)


def add_parsers(sub: Any) -> None:
    """``heads prompts|questions|follow-ups|distill|label|train|curve|package``."""
    group = add_group(sub, "heads", "Medusa heads for a Hugging Face model, by self-distillation")
    p = add_command(group, "prompts",
                    "distillation prompts that look like what users ask, kinds mixed by "
                    "declared weights over the shared data", cmd_heads_prompts)
    p.add_argument("--data", type=Path, required=True,
                   help="the shared data folder (corpus/ and prompts/ are read)")
    p.add_argument("-n", type=positive_int, default=40000, help="prompts to make")
    p.add_argument("--weights", default="",
                   help="KIND=WEIGHT,... (default: instructions=0.20,explain=0.17,howto=0.15,"
                        "summarize=0.15,rewrite=0.13,reasoning=0.12,t0=0.08); unnamed kinds 0")
    _prompt_file_arguments(p)
    p = add_command(group, "questions",
                    "questions the base writes about passages of the shared corpora "
                    "(self-instruct prompts)", cmd_heads_questions)
    p.add_argument("--data", type=Path, required=True,
                   help="the shared data folder (corpus/ is read)")
    p.add_argument("--base", default="smollm2", help="the model that writes the questions")
    p.add_argument("-n", type=positive_int, default=2000, help="questions to collect")
    p.add_argument("--oversample", type=float, default=1.6,
                   help="passages asked per question wanted (some answers are dropped)")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--batch-size", type=positive_int, default=32,
                   help="requests generated together")
    p.add_argument("--max-new-tokens", type=positive_int, default=48,
                   help="answer cap, tokens")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads")
    _prompt_file_arguments(p)
    p = add_command(group, "follow-ups",
                    "multi-turn prompts: a training prompt, the base's answer from a "
                    "distillation set, and a follow-up request", cmd_heads_followups)
    p.add_argument("--distill", type=Path, required=True,
                   help="the distillation folder whose training answers are the middle turns")
    p.add_argument("--prompts", nargs="+", required=True, type=Path,
                   help="the prompt files that made that set, in the same order")
    p.add_argument("--base", default="smollm2", help="the set's base model (its tokenizer)")
    p.add_argument("-n", type=positive_int, default=4000, help="conversations to make")
    p.add_argument("--min-answer-tokens", type=positive_int, default=16,
                   help="shortest first answer used, tokens")
    _prompt_file_arguments(p)
    p = add_command(group, "distill",
                    "the base's greedy answers and final hidden states on training prompts "
                    "(cached and resumable)", cmd_heads_distill)
    _data_arguments(p)
    p.add_argument("--folder", type=Path, default=None,
                   help="the distillation folder (default: $BLOCKDRAFT_CACHE/distill/<key>, "
                        "keyed by the settings and always continued)")
    p.add_argument("--max-tokens", type=positive_int, default=None,
                   help="answer tokens to reach (this run stops between shards)")
    p.add_argument("--minutes", type=float, default=None,
                   help="time box of this run, minutes (it stops between shards)")
    p.add_argument("--reverse", action="store_true",
                   help="missing shards last first (a second process on another core)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="generate the shards on Ray actors that each load the base once: a "
                        "local Ray of --workers CPUs, or the cluster at ADDRESS (the same set, "
                        "shard for shard; blockdraft[ray])")
    p.add_argument("--workers", type=positive_int, default=2,
                   help="Ray actors, one CPU each (default %(default)s)")
    p.add_argument("--resume", action="store_true",
                   help="--folder holds a set made with these settings: add to it")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what --folder holds (only once this run ends)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = add_command(group, "label",
                    "a distillation set's texts labelled by the base in one forward each "
                    "(states and next tokens at prefill speed; resumable)", cmd_heads_label)
    p.add_argument("source", type=Path,
                   help="the distillation folder whose answers are the texts to label")
    p.add_argument("--base", default="smollm2",
                   help="the model that labels (a known name, an HF folder or a GGUF file)")
    p.add_argument("--dtype", choices=DTYPES, default="float32",
                   help="the base's dtype while labelling (default %(default)s: the "
                        "precision decoding is judged in)")
    p.add_argument("--batch-size", type=positive_int, default=16,
                   help="texts per forward (default %(default)s)")
    p.add_argument("--folder", type=Path, default=None,
                   help="the labelled set (default: $BLOCKDRAFT_CACHE/labels/<key>, keyed by "
                        "the settings and the source; always continued)")
    p.add_argument("--resume", action="store_true",
                   help="--folder holds a set labelled with these settings: add to it")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what --folder holds (only once this run ends)")
    p.add_argument("--max-tokens", type=positive_int, default=None,
                   help="tokens to reach in all (this run stops between shards)")
    p.add_argument("--minutes", type=float, default=None,
                   help="time box of this run, minutes (it stops between shards)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = add_command(group, "train",
                    "distil (or reuse the distillation set), train Medusa heads and write them",
                    cmd_heads_train)
    _train_arguments(p)

    p = add_command(group, "curve",
                    "score trained heads on every held-out position of a distillation set "
                    "(data_curve.json, .md, .png)", cmd_heads_curve)
    p.add_argument("runs", nargs="+", type=Path,
                   help="heads folders (-o of heads train) or training folders (its --work)")
    p.add_argument("--data", required=True, type=Path,
                   help="the distillation folder whose held-out split scores them")
    p.add_argument("--base", default="smollm2",
                   help="the base model whose lm_head the heads share (default smollm2)")
    p.add_argument("-o", "--out", required=True, type=Path,
                   help="the folder for data_curve.{json,md,png}")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what -o holds (only once the new curve is complete)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = add_command(group, "package",
                    "the heads with a shortlist and a drafting recipe (what decode(model, ids) "
                    "drafts with)", cmd_heads_package)
    p.add_argument("heads", type=Path, help="a Medusa version-2 heads folder")
    p.add_argument("--data", type=Path, default=None,
                   help="a distillation set whose training answers the shortlist counts")
    p.add_argument("--shortlist", type=positive_int, default=None,
                   help="draft over this many most frequent answer tokens (e.g. 8192)")
    p.add_argument("--ngram", type=Path, default=None,
                   help="an n-gram LM (KenLM binary) over the base's token ids to package")
    p.add_argument("--acceptance", type=Path, default=None,
                   help="acceptance tables (JSON, from benchmarks/tune_drafting.py)")
    p.add_argument("--recipe", type=Path, default=None,
                   help="the tuned settings (recipe.json of benchmarks/tune_drafting.py)")
    p.add_argument("-o", "--out", required=True, type=Path, help="the heads folder to write")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what -o holds (only once the new folder is complete)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
