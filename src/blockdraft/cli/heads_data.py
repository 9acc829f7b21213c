"""The data commands of ``blockdraft heads`` (:mod:`blockdraft.cli.heads`): prompt files
(``heads prompts``, ``questions``, ``follow-ups``) and the sets the heads learn from (``heads
distill``, ``label``).

Every output follows the one rule of :func:`blockdraft.core.outputs.claim_output`. A
distillation or labelled set goes to the cache's folder, keyed by the settings and always
continued, or to ``--folder``, continued only with ``--resume`` and with the settings that made
it; a set a limit stopped early is kept, and the command exits with 3.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from blockdraft.cli.common import (
    DTYPES,
    JSON_HELP,
    CliError,
    add_command,
    command_line,
    default_of,
    print_json,
    print_table,
    stopped_early,
)
from blockdraft.cli.values import (
    ListAction,
    Rule,
    Weights,
    add_rules,
    non_negative_int,
    number,
    positive_int,
)
from blockdraft.core.outputs import claim_output


def cmd_heads_distill(args: argparse.Namespace) -> int:
    from blockdraft.training import heads

    def run(folder: Path | None) -> Any:
        return heads.distill(
            args.base, [str(p) for p in args.prompts], folder=folder, dtype=args.dtype,
            max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
            shard_size=args.shard_size, seed=args.seed, heldout_fraction=args.heldout_fraction,
            heldout_min=args.heldout_min, max_prompts=args.max_prompts,
            max_tokens=args.max_tokens, minutes=args.minutes, threads=args.threads,
            reverse=args.reverse, ray=args.ray,
            workers=DISTILL_WORKERS if args.workers is None else args.workers)

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


# -------------------------------------------------------------------------- archive/restore


def cmd_heads_archive(args: argparse.Namespace) -> int:
    """``heads archive``: a distillation set's answers and plan in one small sealed file (no
    states, no prompt text), written under the output rule."""
    from blockdraft.training import heads
    from blockdraft.training.heads.archive import archive_answers

    dset = heads.open_distill_set(args.distill)
    output = claim_output(args.out, what="an answers archive", error=CliError,
                          overwrite=args.overwrite, folder=False)
    with output.writing() as writing:
        archive = archive_answers(dset, writing.path)
    size = Path(args.out).stat().st_size
    record = {"out": str(args.out), "digest": archive.digest, "shards": len(archive.shards),
              "shards_planned": len(dset.plan["shards"]), "tokens": archive.tokens,
              "bytes": size, "complete": dset.complete}
    if args.json:
        print_json(record)
        return 0
    print_table(f"answers archive: {args.out}", ["", "value"], [
        ("shards", f"{len(archive.shards)} of {len(dset.plan['shards'])}"),
        ("answer tokens", archive.tokens),
        ("size", f"{size / 1e6:.2f} MB ({8 * size / max(archive.tokens, 1):.1f} bits a token)"),
        ("digest", archive.digest[:16]),
    ], caption=f"from {dset.folder}; `blockdraft heads restore` rebuilds the set with the "
               "same prompt files")
    return 0


def cmd_heads_restore(args: argparse.Namespace) -> int:
    """``heads restore``: the archived set rebuilt in ``--folder`` (its states recomputed by the
    base in one forward a batch), continued with ``--resume``."""
    from blockdraft.training import heads
    from blockdraft.training.heads.archive import read_archive, restore

    read_archive(args.archive)  # a bad archive is named before anything is claimed
    if args.resume:
        heads.check_distill_folder(args.folder)
    output = claim_output(args.folder, what="a distillation set", error=CliError,
                          overwrite=args.overwrite, resume=args.resume, flag="--folder",
                          own=heads.SET_FILES)
    with output.writing() as writing:
        restore(args.archive, [str(p) for p in args.prompts], writing.path, base=args.base,
                batch_size=args.batch_size, threads=args.threads, progress=not args.json)
    _report_distill(args, heads.open_distill_set(output.path))
    return 0


def data_arguments(p: argparse.ArgumentParser, prompts_required: bool = True) -> None:
    """The data step's options, shared by ``heads distill`` and ``heads train``."""
    from blockdraft.training.heads.distill import distill

    p.add_argument("--base", default="smollm2",
                   help="the base model: a known name (smollm2), a Hugging Face folder or a "
                        ".gguf file (default smollm2)")
    p.add_argument("--prompts", action=ListAction, required=prompts_required, type=Path,
                   help='JSON-lines files of training prompts, {"source": ..., "prompt": ...} '
                        "a line (training data only, never evaluation text)"
                        + ("" if prompts_required else "; not needed when --data holds a "
                           "labelled set (heads label)"))
    p.add_argument("--dtype", choices=DTYPES, default=default_of(distill, "dtype"),
                   help="the base's dtype while generating (default %(default)s)")
    p.add_argument("--max-new-tokens", type=positive_int,
                   default=default_of(distill, "max_new_tokens"),
                   help="answer length cap, tokens (default %(default)s)")
    p.add_argument("--batch-size", type=positive_int, default=default_of(distill, "batch_size"),
                   help="prompts generated together (default %(default)s)")
    p.add_argument("--shard-size", type=positive_int, default=default_of(distill, "shard_size"),
                   help="prompts per data shard (default %(default)s)")
    p.add_argument("--heldout-fraction", type=number(0.0, below=1.0),
                   default=default_of(distill, "heldout_fraction"),
                   help="share of the prompts held out for evaluation (default %(default)s)")
    p.add_argument("--heldout-min", type=non_negative_int,
                   default=default_of(distill, "heldout_min"),
                   help="at least this many prompts held out (default %(default)s)")
    p.add_argument("--max-prompts", type=positive_int, default=None,
                   help="training prompts to distil (default: all)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seeds the held-out split (and, for heads train, the heads)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads (default: 1 when the machine is busy, else every core)")



# ------------------------------------------------------------------------------ prompt files


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
    weights = (dict(DEFAULT_WEIGHTS) if args.weights is None
               else {kind: args.weights.get(kind, 0.0) for kind in DEFAULT_WEIGHTS})
    prompts, record = build_mix(args.data, args.n, weights, seed=args.seed)
    record["command"] = command_line(args)
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

    record["command"] = command_line(args)
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


def _prompt_file_arguments(p: argparse.ArgumentParser) -> None:
    """The options every command that writes a prompt file shares."""
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("-o", "--out", type=Path, required=True,
                   help="the prompt file (JSON lines; its record beside it as .mix.json)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--json", action="store_true", help=JSON_HELP)



DISTILL_WORKERS = 2
"""``heads distill --ray``'s actors when ``--workers`` is not given."""

SET_RULES = tuple(
    Rule(option, "applies to a --folder; the default folder in the cache is keyed by the "
         f"settings and always continued: give --folder, or drop {option}",
         lambda a: a.folder is not None, (option,)) for option in ("--overwrite", "--resume"))
"""``--overwrite`` and ``--resume`` of a set's command (``heads distill``, ``heads label``)."""

DISTILL_RULES = (
    Rule("--workers", "applies only with --ray (it counts the Ray actors; without --ray the "
         "shards are generated here, one after the other); add --ray, or drop --workers",
         lambda a: a.ray is not None, ("--workers", "3")),
    *(Rule(option, "stops the serial data step between shards, and shards generated on Ray "
                   f"(--ray) stop by --max-prompts only; drop {option} or --ray",
           lambda a: a.ray is None, ("--ray", option, "1"))
      for option in ("--max-tokens", "--minutes")),
)
"""The options of ``heads distill`` that apply only with or without ``--ray``."""


def add_parsers(group: Any) -> None:
    """``heads prompts|questions|follow-ups|distill|archive|restore|label`` in the ``heads``
    group."""
    from blockdraft.training.heads.mix import KINDS

    p = add_command(group, "prompts",
                    "distillation prompts that look like what users ask, kinds mixed by "
                    "declared weights over the shared data", cmd_heads_prompts)
    p.add_argument("--data", type=Path, required=True,
                   help="the shared data folder (corpus/ and prompts/ are read)")
    p.add_argument("-n", type=positive_int, default=40000, help="prompts to make")
    p.add_argument("--weights", type=Weights(KINDS), default=None,
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
    p.add_argument("--oversample", type=number(1.0), default=1.6,
                   help="passages asked per question wanted, >= 1 (some answers are dropped)")
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
    p.add_argument("--prompts", action=ListAction, required=True, type=Path,
                   help="the prompt files that made that set, in the same order")
    p.add_argument("--base", default="smollm2", help="the set's base model (its tokenizer)")
    p.add_argument("-n", type=positive_int, default=4000, help="conversations to make")
    p.add_argument("--min-answer-tokens", type=positive_int, default=16,
                   help="shortest first answer used, tokens")
    _prompt_file_arguments(p)
    p = add_command(group, "distill",
                    "the base's greedy answers and final hidden states on training prompts "
                    "(cached and resumable)", cmd_heads_distill)
    data_arguments(p)
    p.add_argument("--folder", type=Path, default=None,
                   help="the distillation folder (default: $BLOCKDRAFT_CACHE/distill/<key>, "
                        "keyed by the settings and always continued)")
    p.add_argument("--max-tokens", type=positive_int, default=None,
                   help="answer tokens to reach (this run stops between shards)")
    p.add_argument("--minutes", type=number(0.0), default=None,
                   help="time box of this run, minutes (it stops between shards)")
    p.add_argument("--reverse", action="store_true",
                   help="missing shards last first (a second process on another core)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="generate the shards on Ray actors that each load the base once: a "
                        "local Ray of --workers CPUs, or the cluster at ADDRESS (the same set, "
                        "shard for shard; blockdraft[ray])")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="with --ray: Ray actors, one CPU each (default 2)")
    p.add_argument("--resume", action="store_true",
                   help="--folder holds a set made with these settings: add to it")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what --folder holds (only once this run ends)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    add_rules(p, *SET_RULES, *DISTILL_RULES)

    p = add_command(group, "archive",
                    "a distillation set's answers in one small sealed file that survives a new "
                    "machine (no hidden states, no prompt text)", cmd_heads_archive)
    p.add_argument("distill", type=Path, help="the distillation folder to archive")
    p.add_argument("-o", "--out", type=Path, required=True,
                   help="the archive to write (.npz; about 2 bytes an answer token)")
    p.add_argument("--overwrite", action="store_true", help="replace the archive at -o")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = add_command(group, "restore",
                    "a distillation set rebuilt from its answers archive and the prompt files "
                    "that made it (states recomputed at prefill speed; resumable)",
                    cmd_heads_restore)
    p.add_argument("archive", type=Path, help="the answers archive (heads archive)")
    p.add_argument("--prompts", action=ListAction, required=True, type=Path,
                   help="the prompt files that made the set, in the same order (checked)")
    p.add_argument("--folder", type=Path, required=True, help="the distillation set to write")
    p.add_argument("--base", default=None,
                   help="the base model (default: the one the archive names)")
    p.add_argument("--batch-size", type=positive_int, default=16,
                   help="prompts per forward (default %(default)s)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads")
    p.add_argument("--resume", action="store_true",
                   help="--folder holds a restore of this archive begun earlier: finish it")
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
    p.add_argument("--minutes", type=number(0.0), default=None,
                   help="time box of this run, minutes (it stops between shards)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    add_rules(p, *SET_RULES)
