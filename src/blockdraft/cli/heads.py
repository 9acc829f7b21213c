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

Modules: this one (the group, ``heads train``, ``heads curve``), :mod:`blockdraft.cli.heads_data`
(prompts, questions, follow-ups, distill, label), :mod:`blockdraft.cli.heads_package`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import blockdraft.cli.heads_data as heads_data
import blockdraft.cli.heads_package as heads_package
from blockdraft.cli.common import (
    JSON_HELP,
    CliError,
    add_command,
    add_group,
    command_line,
    print_json,
    print_table,
    stopped_early,
)
from blockdraft.cli.heads_data import data_arguments
from blockdraft.cli.heads_package import check_shortlist_size
from blockdraft.cli.values import (
    ListAction,
    Rule,
    UsageError,
    add_rules,
    non_negative_int,
    number,
    positive_int,
)
from blockdraft.core.outputs import claim_output


def _threads(args: argparse.Namespace) -> None:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


# ------------------------------------------------------------------------------------ train


def heads_settings(args: argparse.Namespace) -> Any:
    """The :class:`~blockdraft.training.heads.HeadsTrainSettings` of ``heads train``'s
    arguments, checked."""
    from blockdraft.training.heads import HeadsTrainSettings
    from blockdraft.training.heads.eagle_train import EAGLE_BATCH, EAGLE_DEFAULTS

    defaults = HeadsTrainSettings()
    shortlist = defaults.shortlist if args.shortlist is None else args.shortlist
    eagle: dict[str, Any] = {}
    if args.arch == "eagle":  # the fusion's defaults (EAGLE-1 or EAGLE-3) under what is given
        eagle = {"fusion": args.fusion or "top"}
        for name, value in EAGLE_DEFAULTS[eagle["fusion"]].items():
            given = getattr(args, name)
            eagle[name] = value if given is None else given
    settings = HeadsTrainSettings(
        heads=args.heads, layers=args.layers, seed=args.seed, steps=args.steps,
        batch=args.batch or (EAGLE_BATCH if args.arch == "eagle" else defaults.batch),
        lr=args.lr, warmup=args.warmup, schedule=args.schedule, loss=args.loss,
        eval_every=args.eval_every, eval_positions=args.eval_positions, patience=args.patience,
        vocab=_vocab(args), shortlist=shortlist, arch=args.arch, **eagle)
    settings.check()
    return settings


def _vocab(args: argparse.Namespace) -> str:
    """``--vocab``, default ``shortlist`` for an EAGLE layer (its head), ``full`` otherwise."""
    return str(args.vocab or ("shortlist" if args.arch == "eagle" else "full"))


def cmd_heads_train(args: argparse.Namespace) -> int:
    """``heads train`` (and ``train --mode medusa``, through :func:`train_namespace`)."""
    from blockdraft.training import heads

    settings = heads_settings(args)
    if not args.prompts and not (args.data is not None and (args.data / "plan.json").is_file()
                                 and heads.open_distill_set(args.data).labelled):
        raise UsageError("heads train needs --prompts (the data step distils them), unless "
                         "--data holds a labelled set (blockdraft heads label)")
    if args.shortlist is not None:  # against the base's vocabulary, before any work
        check_shortlist_size(args.shortlist, args.base)
    out = Path(args.out)
    if (args.resume and not args.overwrite and out.is_dir() and any(out.iterdir())
            and not (out / heads.CURVE_FILE).is_file()):
        raise CliError(f"-o {out} holds no heads written by blockdraft heads train (no "
                       f"{heads.CURVE_FILE}), so there is no run to continue; pass --overwrite "
                       "to replace it, or choose a new path")
    # written at the end by a rename (its progress is in the training folder): a new -o is
    # built beside it, and what appeared there meanwhile is not replaced
    what = "an EAGLE draft layer" if settings.arch == "eagle" else "Medusa heads"
    output = claim_output(out, what=what, error=CliError, overwrite=args.overwrite,
                          resume=args.resume, own=heads.HEADS_FILES, in_place=False)
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
            command=command_line(args), progress=not args.json, init=args.init)
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
            first, unit = (1, "draft step") if settings.arch == "eagle" else (2, "head")
            rows += [(f"held-out top-1, {unit} {i + first}", float(v))
                     for i, v in enumerate(last.get("top1", ()))]
        title = (f"trained an EAGLE draft layer (fusion {settings.fusion})"
                 if settings.arch == "eagle" else f"trained {settings.heads} Medusa heads")
        print_table(f"{title} on {args.base}", ["", "value"], rows, caption=f"heads: {out}")
    return 0 if writing.complete else stopped_early(writing.partial_message())


def _train_arguments(p: argparse.ArgumentParser) -> None:
    """``heads train``'s arguments (all of them: :func:`train_namespace` reads the defaults)."""
    from blockdraft.training.heads import HeadsTrainSettings

    defaults = HeadsTrainSettings()
    data_arguments(p, prompts_required=False)
    p.add_argument("-o", "--out", required=True, type=Path,
                   help="the heads folder to write (Medusa version-2 layout, bfloat16, "
                        "curve.json, curve.png, README.md)")
    p.add_argument("--heads", type=positive_int, default=defaults.heads,
                   help="Medusa heads (blockdraft heads 2..n+1, so h = n + 1; default "
                        "%(default)s); --arch eagle: the draft steps scored at each evaluation")
    p.add_argument("--layers", type=positive_int, default=defaults.layers,
                   help="ResBlocks per head (default %(default)s)")
    p.add_argument("--distill-minutes", type=number(0.0), default=None,
                   help="time box of the data step, minutes (0: only read the set as it is)")
    p.add_argument("--minutes", type=number(0.0), default=None,
                   help="time box of the training, minutes (a later run with --resume goes on)")
    p.add_argument("--arch", choices=("medusa", "prefix", "eagle"), default=defaults.arch,
                   help="medusa: independent heads; prefix: each head also reads the token "
                        "before its target (Hydra-style: their lattice is a tree); eagle: one "
                        "decoder layer of the base's block drafting autoregressively with its "
                        "own KV cache (EAGLE-style; --fusion)")
    p.add_argument("--fusion", choices=("top", "layers"), default=None,
                   help="--arch eagle: the base feature the layer reads: top (EAGLE-1, the "
                        "final hidden state; the default) or layers (EAGLE-3, low, middle and "
                        "high layers fused); each sets the defaults of --unroll, "
                        "--feature-weight and --context")
    p.add_argument("--unroll", type=positive_int, default=None,
                   help="--arch eagle: draft steps unrolled in training on the layer's own "
                        "features (training-time test; default 1 with top, 3 with layers)")
    p.add_argument("--feature-weight", type=number(0.0), default=None,
                   help="--arch eagle, --fusion top: weight of the regression onto the "
                        "base's next feature beside cross-entropy 1 (default 10, EAGLE-1's "
                        "ratio)")
    p.add_argument("--context", choices=("answer", "prompt"), default=None,
                   help="--arch eagle: the positions the layer attends to: answer (the set's "
                        "stored states with top: no base run; the default with top) or prompt "
                        "(the prompt too, features from a forward of the base in --dtype, as "
                        "at decode time; the default with layers)")
    p.add_argument("--init", type=Path, default=None, metavar="HEADS_DIR",
                   help="start from these heads (a warm start: another epoch, new data; the "
                        "same --arch, --heads and --layers) instead of a random start")
    p.add_argument("--train-tokens", type=positive_int, default=None,
                   help="train on the first training shards holding this many answer tokens "
                        "(a learning curve's point; default: all the set holds)")
    p.add_argument("--steps", type=positive_int, default=defaults.steps,
                   help="optimizer steps, the cosine schedule's length (default %(default)s)")
    p.add_argument("--batch", type=positive_int, default=None,
                   help=f"positions per step (default {defaults.batch}); --arch eagle: whole "
                        "answers per step (default 8)")
    p.add_argument("--lr", type=number(above=0.0), default=defaults.lr,
                   help="peak learning rate (default %(default)s)")
    p.add_argument("--warmup", type=non_negative_int, default=defaults.warmup,
                   help="linear warm-up steps (default %(default)s)")
    p.add_argument("--schedule", choices=("cosine", "constant"), default=defaults.schedule)
    p.add_argument("--loss", choices=("ce", "kl"), default=defaults.loss,
                   help="ce: the base's greedy tokens; kl: its distributions")
    p.add_argument("--vocab", choices=("full", "seen", "shortlist"), default=None,
                   help="softmax of the training loss over the full vocabulary (the default), "
                        "only the tokens seen in the training answers (several times faster), "
                        "or the --shortlist most frequent of them: the draft vocabulary of "
                        "heads packaged with that shortlist (faster still; --arch eagle: its "
                        "head, the default there)")
    p.add_argument("--shortlist", type=positive_int, default=None,
                   help="with --vocab shortlist: the training shortlist's size, at most the "
                        f"base's vocabulary (default {defaults.shortlist}; package the heads "
                        "with the same size)")
    p.add_argument("--eval-every", type=positive_int, default=defaults.eval_every,
                   help="steps between held-out evaluations and checkpoints "
                        "(default %(default)s)")
    p.add_argument("--eval-positions", type=positive_int, default=defaults.eval_positions,
                   help="held-out positions scored per evaluation (default %(default)s)")
    p.add_argument("--patience", type=non_negative_int, default=defaults.patience,
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
    eagle_only = "applies only with --arch eagle (an EAGLE draft layer); add it, or drop it"
    add_rules(p, Rule("--shortlist", "applies only with --vocab shortlist (the softmax over the "
                                     "shortlist); add --vocab shortlist, or drop --shortlist",
                      lambda a: _vocab(a) == "shortlist", ("--vocab", "full", "--shortlist",
                                                           "512")),
              *(Rule(option, eagle_only, lambda a: a.arch == "eagle", (option, value))
                for option, value in (("--fusion", "layers"), ("--unroll", "3"),
                                      ("--feature-weight", "1"), ("--context", "prompt"))),
              Rule("--feature-weight", "applies only with --fusion top (the base's next "
                                       "feature is what it regresses onto); drop it",
                   lambda a: a.arch != "eagle" or (a.fusion or "top") == "top",
                   ("--arch", "eagle", "--fusion", "layers", "--feature-weight", "1")))


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
    from blockdraft.models.heads.eagle_layer import EagleLayer
    from blockdraft.models.hf.loading import load_causal_lm

    eagle = [isinstance(r.heads, EagleLayer) for r in runs]
    if any(eagle) and not all(eagle):
        raise UsageError("heads curve scores EAGLE draft layers (draft steps 1..8) or heads, "
                         "not both at once: give them in two curves")
    model, tokenizer = load_causal_lm(args.base, "float32")
    lm_head = heads.lm_head_weight(model)
    embed = model.get_input_embeddings().weight.detach().float().clone()  # prefix heads read it
    if all(eagle):
        from blockdraft.training.heads.eagle_train import score_eagle_runs
        from blockdraft.training.heads.generation import pad_id_of

        rows = score_eagle_runs(runs, dset, model, lm_head, embed,
                                pad_id=pad_id_of(tokenizer) if tokenizer is not None else 0)
    else:
        del model
        rows = heads.score_runs(runs, dset, lm_head, embed=embed)
    title = ("EAGLE draft layers: held-out accuracy per draft step and chain B" if all(eagle)
             else "Medusa heads: held-out accuracy against training data")
    with output.writing() as writing:
        heads.write_data_curve(rows, writing.path, title, command_line(args), all(eagle))
    if args.json:
        print_json({"out": str(out), "runs": rows})
        return 0
    print_table(title,
                ["training answer tokens", "prompts", "step", "mean top-1", "vanilla B",
                 "oracle(5) B"],
                [(r["tokens"], r["prompts"], r["step"], r["mean_top1"], r["B_vanilla"],
                  r["B_oracle5"]) for r in rows],
                caption=f"data_curve.{{json,md,png}}: {out}")
    return 0



def add_parsers(sub: Any) -> None:
    """``heads prompts|questions|follow-ups|distill|label|train|curve|package``."""
    group = add_group(sub, "heads", "Medusa heads for a Hugging Face model, by self-distillation")
    heads_data.add_parsers(group)  # prompts, questions, follow-ups, distill, label
    p = add_command(group, "train",
                    "distil (or reuse the distillation set), train Medusa heads and write them",
                    cmd_heads_train)
    _train_arguments(p)

    p = add_command(group, "curve",
                    "score trained heads on every held-out position of a distillation set "
                    "(data_curve.json, .md, .png)", cmd_heads_curve)
    p.add_argument("runs", action=ListAction, type=Path,
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
    heads_package.add_parser(group)  # package


_MOVED = {"cmd_heads_distill": "heads_data", "cmd_heads_label": "heads_data",
          "cmd_heads_prompts": "heads_data", "cmd_heads_questions": "heads_data",
          "cmd_heads_followups": "heads_data", "cmd_heads_package": "heads_package",
          "PACKAGE_FILES": "heads_package", "DTYPES": "common"}
"""Names of the data and package commands, in their own modules now."""


def __getattr__(name: str) -> Any:
    """The old import path of what moved to :mod:`blockdraft.cli.heads_data`,
    :mod:`blockdraft.cli.heads_package` and :mod:`blockdraft.cli.common`, kept."""
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(f"blockdraft.cli.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
