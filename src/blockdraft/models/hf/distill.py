"""Self-distillation data for Medusa heads: the base model's own greedy answers and hidden states.

docs/definitions.md sec. 10. Medusa heads are trained on what the base model itself says
(Medusa-2 self-distillation; Stern et al. sec. 6.2): for every prompt ``x`` the base's greedy
answer ``y_1 .. y_m`` (cut after the EOS, which is kept; at most ``max_new_tokens``) and the
base's final hidden states ``h_0 .. h_{m-1}`` (after the final norm), where ``h_j`` is the state
at the position whose base prediction is ``y_{j+1}``: ``h_0`` at the prompt's last token,
``h_j`` at ``y_j``. A head trained on ``h_j`` then needs no base model at all.

The hidden states come for free during generation: a forward hook on the base's final norm
records the prefill's last position and every step's new position, so no second pass is run.
Generation is batched with left padding, prompts sorted by length within a shard, and a row
leaves the batch (and the KV cache) as soon as it has finished.

Data layout. A distillation set is a folder (by default ``$BLOCKDRAFT_CACHE/distill/<key>``,
``key`` a hash of every setting that changes its content) holding ``plan.json`` (settings,
the held-out split, the shard list) and one ``<split>-<nnnnn>.safetensors`` file per shard,
written atomically when the whole shard is done, so an interrupted run leaves no partial shard
and a re-run skips finished ones. A shard of ``P`` prompts with ``N`` answer tokens holds

    ``prompt_index``    int64 ``[P]``       indices into the prompt list (input order)
    ``prompt_ids``      int32 ``[sum |x|]`` the formatted prompts' token ids, flat
    ``prompt_offsets``  int64 ``[P + 1]``
    ``answer_ids``      int32 ``[N]``       ``y_1 .. y_m`` of every prompt, flat
    ``answer_offsets``  int64 ``[P + 1]``
    ``hidden``          ``[N, d]`` (bfloat16 by default): row ``answer_offsets[p] + j`` is
                        ``h_j`` of prompt ``p``, so ``answer_ids`` at the same row is the base's
                        prediction from that state.

Public surface:
    DistillSettings                            what the data depend on (hashed into the key)
    read_prompts(paths) -> list[str]           ``{"source", "prompt"}`` JSON lines
    split_prompts(n, seed, fraction, minimum) -> (train, heldout)   index arrays, disjoint
    format_prompts(tokenizer, texts) -> list[list[int]]             the chat template
    greedy_batch(model, prompts, max_new_tokens, eos_id, pad_id) -> (answers, hidden)
    build_distill_set(model, prompt_ids, folder, settings, ...) -> DistillSet
    distill(base, prompt_files, ...) -> DistillSet         load, format, generate (the CLI's)
    DistillSet, open_distill_set(folder)                   read what was written
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockdraft.core.checks import check_int, check_positive_int
from blockdraft.core.files import atomic_path, cache_dir, write_text_atomic
from blockdraft.core.jsonl import iter_jsonl
from blockdraft.models.errors import ModelError

FORMAT_VERSION = "1"
"""Bumped whenever the shard contents change meaning; part of the cache key."""

SPLITS = ("heldout", "train")


@dataclass(frozen=True)
class DistillSettings:
    """Every setting the distillation data depend on (all are hashed into the cache key).

    Attributes:
        base: the base model's identity (a name such as ``"smollm2"`` and its resolved folder).
        dtype: the dtype the base runs in (``"bfloat16"``).
        max_new_tokens: answer length cap, tokens.
        batch_size: prompts generated together (bfloat16 results depend slightly on it).
        shard_size: prompts per shard file.
        seed: seeds the shuffle and the held-out split.
        heldout_fraction: share of the prompts held out (for evaluation only).
        heldout_min: at least this many prompts held out (fewer only if there are fewer).
        hidden_dtype: the dtype the hidden states are stored in.
        prompts: a hash of the prompt token ids (the files, the template and the tokenizer).
    """

    base: str
    dtype: str = "bfloat16"
    max_new_tokens: int = 192
    batch_size: int = 32
    shard_size: int = 256
    seed: int = 0
    heldout_fraction: float = 0.02
    heldout_min: int = 200
    hidden_dtype: str = "bfloat16"
    prompts: str = ""
    version: str = field(default=FORMAT_VERSION)

    def key(self) -> str:
        """A 16-hex-digit hash of every field: the cache folder's name."""
        raw = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


# ---------------------------------------------------------------------------------- prompts


def read_prompts(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The ``"prompt"`` field of every line of the given JSON-lines files, in order.

    Raises:
        ModelError: a missing file, a line that is not a JSON object with a string
            ``"prompt"``, or no prompts at all.
    """
    texts: list[str] = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise ModelError(f"prompt file {str(p)!r} does not exist")
        for number, obj in iter_jsonl(p, ModelError):
            if not isinstance(obj.get("prompt"), str):
                raise ModelError(f"{p}:{number}: expected an object with a string 'prompt'")
            texts.append(obj["prompt"])
    if not texts:
        raise ModelError("no prompts in " + ", ".join(str(p) for p in paths))
    return texts


def split_prompts(
    n: int, seed: int = 0, fraction: float = 0.02, minimum: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """A seeded shuffle of ``range(n)`` cut into (train, held-out) index arrays (int64).

    The held-out part has ``max(minimum, round(fraction * n))`` prompts, at most ``n - 1``
    (at least one prompt is left to train on when ``n >= 2``). The two arrays are disjoint and
    together hold every index once; both depend only on ``(n, seed, fraction, minimum)``.

    Raises:
        ModelError: ``n < 2``, or ``fraction`` outside ``[0, 1)``.
    """
    n = check_int(n, "n", ModelError, minimum=2)
    if not 0.0 <= fraction < 1.0:
        raise ModelError(f"heldout fraction must lie in [0, 1), got {fraction!r}")
    order = np.random.default_rng(seed).permutation(n).astype(np.int64)
    held = min(max(int(minimum), int(round(fraction * n))), n - 1)
    return order[held:], order[:held]


def format_prompts(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Each text as one user turn in the tokenizer's chat template, with the generation
    prompt (``add_generation_prompt=True``), as token ids.

    Raises:
        ModelError: the tokenizer has no chat template.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError("the tokenizer has no chat template; pass token ids instead")
    out: list[list[int]] = []
    for text in texts:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # a BatchEncoding
            ids = ids["input_ids"]
        out.append([int(i) for i in ids])
    return out


def hash_prompts(prompt_ids: Sequence[Sequence[int]]) -> str:
    """A 16-hex-digit hash of a list of token-id lists (the distillation input)."""
    h = hashlib.sha256()
    for ids in prompt_ids:
        h.update(np.asarray(ids, dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------- generation


def final_norm(model: Any) -> torch.nn.Module:
    """The module whose output is the base's final hidden state (Llama-style ``model.norm``,
    GPT-2's ``transformer.ln_f``).

    Raises:
        ModelError: neither is found.
    """
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    for owner in (decoder, getattr(model, "model", None), getattr(model, "transformer", None)):
        for name in ("norm", "ln_f", "final_layernorm"):
            module = getattr(owner, name, None) if owner is not None else None
            if isinstance(module, torch.nn.Module):
                return module
    raise ModelError(f"cannot find the final norm of {type(model).__name__}")


@torch.no_grad()
def greedy_batch(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_id: int | None,
    pad_id: int = 0,
) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Greedy answers of a batch of prompts and the base's final hidden states along them.

    One left-padded prefill, then one step per token on the model's own KV cache; a row that
    has produced ``eos_id`` (kept) or ``max_new_tokens`` tokens leaves the batch.

    Args:
        model: a ``transformers`` causal LM (eval mode) with a final norm (:func:`final_norm`).
        prompts: ``B`` non-empty token-id lists.
        max_new_tokens: answer length cap ``>= 1``.
        eos_id: the end-of-sequence id (None: answers always have ``max_new_tokens`` tokens).
        pad_id: the id padding is filled with (masked out; any valid id).

    Returns:
        ``answers[b] = [y_1 .. y_m]`` and ``hidden[b]`` of shape ``[m, d]`` (the model's dtype):
        row ``j`` is ``h_j``, the final-norm output at the position predicting ``y_{j+1}``.
    """
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens", ModelError)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ModelError("greedy_batch needs a non-empty list of non-empty prompts")
    device = next(model.parameters()).device
    b = len(prompts)
    longest = max(len(p) for p in prompts)
    ids = torch.full((b, longest), pad_id, dtype=torch.long)
    mask = torch.zeros((b, longest), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, longest - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        mask[row, longest - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)

    captured: list[torch.Tensor] = []

    def hook(_module: Any, _inputs: Any, output: Any) -> None:
        out = output[0] if isinstance(output, tuple) else output
        captured.append(out[:, -1, :].detach())  # (b_active, d): the newest position

    from transformers import DynamicCache

    handle = final_norm(model).register_forward_hook(hook)
    answers: list[list[int]] = [[] for _ in range(b)]
    hidden: list[list[torch.Tensor]] = [[] for _ in range(b)]
    try:
        active = torch.arange(b)
        cache = DynamicCache()
        inputs, attention, pos = ids, mask, positions
        while True:
            captured.clear()
            out = model(input_ids=inputs, attention_mask=attention, position_ids=pos,
                        past_key_values=cache, use_cache=True, logits_to_keep=1)
            if len(captured) != 1:
                raise ModelError(f"the final-norm hook fired {len(captured)} times in a forward")
            state = captured[0].cpu()  # (b_active, d)
            nxt = out.logits[:, -1, :].argmax(-1).cpu()  # (b_active,)
            cache = out.past_key_values
            keep: list[int] = []
            for k, row in enumerate(active.tolist()):
                token = int(nxt[k])
                answers[row].append(token)
                hidden[row].append(state[k])
                if not (token == eos_id or len(answers[row]) >= max_new_tokens):
                    keep.append(k)
            if not keep:
                break
            if len(keep) < len(active):
                index = torch.as_tensor(keep, dtype=torch.long)
                active = active[index]
                cache.batch_select_indices(index.to(device))
                attention = attention[index.to(device)]
                pos = pos[index.to(device)]
                nxt = nxt[index]
            attention = torch.cat([attention, attention.new_ones(len(keep), 1)], dim=1)
            pos = pos[:, -1:] + 1
            inputs = nxt.view(-1, 1).to(device)
    finally:
        handle.remove()
    return answers, [torch.stack(rows) for rows in hidden]


# ----------------------------------------------------------------------------------- shards


@dataclass
class Shard:
    """One shard's contents (see the module docstring for the layout)."""

    prompt_index: np.ndarray  # int64 [P]
    prompt_ids: np.ndarray  # int32 [sum |x|]
    prompt_offsets: np.ndarray  # int64 [P + 1]
    answer_ids: np.ndarray  # int32 [N]
    answer_offsets: np.ndarray  # int64 [P + 1]
    hidden: torch.Tensor  # [N, d]

    @property
    def num_prompts(self) -> int:
        return int(self.prompt_index.size)

    @property
    def num_tokens(self) -> int:
        return int(self.answer_ids.size)

    def answer(self, p: int) -> list[int]:
        """Prompt ``p``'s answer ``y_1 .. y_m`` (``p`` indexes this shard)."""
        return [int(t) for t in self.answer_ids[self.answer_offsets[p]:self.answer_offsets[p + 1]]]

    def prompt(self, p: int) -> list[int]:
        """Prompt ``p``'s token ids."""
        return [int(t) for t in self.prompt_ids[self.prompt_offsets[p]:self.prompt_offsets[p + 1]]]


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))]).astype(np.int64)


def write_shard(path: Path, shard: Shard, metadata: dict[str, str]) -> None:
    """Write one shard atomically (a crash leaves no file)."""
    from safetensors.torch import save_file

    tensors = {
        "prompt_index": torch.from_numpy(shard.prompt_index.astype(np.int64)),
        "prompt_ids": torch.from_numpy(shard.prompt_ids.astype(np.int32)),
        "prompt_offsets": torch.from_numpy(shard.prompt_offsets.astype(np.int64)),
        "answer_ids": torch.from_numpy(shard.answer_ids.astype(np.int32)),
        "answer_offsets": torch.from_numpy(shard.answer_offsets.astype(np.int64)),
        "hidden": shard.hidden.contiguous(),
    }
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def read_shard(path: str | os.PathLike[str]) -> Shard:
    """Read a shard written by :func:`write_shard`.

    Raises:
        ModelError: a missing or unreadable file.
    """
    from safetensors.torch import load_file

    try:
        t = load_file(str(path))
    except (OSError, ValueError, RuntimeError) as e:
        raise ModelError(f"cannot read distillation shard {str(path)!r}: {e}") from e
    return Shard(
        prompt_index=t["prompt_index"].numpy(),
        prompt_ids=t["prompt_ids"].numpy(),
        prompt_offsets=t["prompt_offsets"].numpy(),
        answer_ids=t["answer_ids"].numpy(),
        answer_offsets=t["answer_offsets"].numpy(),
        hidden=t["hidden"],
    )


@dataclass
class DistillSet:
    """A distillation folder: its plan and the shards finished so far.

    Attributes:
        folder: the folder.
        plan: ``plan.json``'s contents (``settings``, ``train``/``heldout`` index lists,
            ``shards``: ``[{"name", "split", "prompts"}]``).
        done: names of the shards whose file exists, in plan order.
    """

    folder: Path
    plan: dict[str, Any]
    done: list[str]

    def shard_path(self, name: str) -> Path:
        return self.folder / f"{name}.safetensors"

    def shards(self, split: str) -> list[str]:
        """Finished shards of ``split`` (``"train"`` or ``"heldout"``), in plan order."""
        names = {s["name"] for s in self.plan["shards"] if s["split"] == split}
        return [n for n in self.done if n in names]

    def load(self, split: str) -> list[Shard]:
        """The finished shards of ``split``, read into memory."""
        return [read_shard(self.shard_path(n)) for n in self.shards(split)]

    def summary(self) -> dict[str, int]:
        """Prompts and answer tokens per finished split (from the shard headers)."""
        out: dict[str, int] = {}
        for split in SPLITS:
            prompts = tokens = 0
            for name in self.shards(split):
                meta = _shard_metadata(self.shard_path(name))
                prompts += int(meta.get("prompts", 0))
                tokens += int(meta.get("tokens", 0))
            out[f"{split}_prompts"], out[f"{split}_tokens"] = prompts, tokens
        return out


def _shard_metadata(path: Path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def open_distill_set(folder: str | os.PathLike[str]) -> DistillSet:
    """The distillation set in ``folder`` (its ``plan.json`` and finished shards).

    Raises:
        ModelError: no ``plan.json`` there.
    """
    root = Path(folder)
    plan_file = root / "plan.json"
    if not plan_file.is_file():
        raise ModelError(f"{str(root)!r} is not a distillation folder (no plan.json)")
    plan = json.loads(plan_file.read_text(encoding="utf-8"))
    done = [s["name"] for s in plan["shards"] if (root / f"{s['name']}.safetensors").is_file()]
    return DistillSet(root, plan, done)


def _plan(settings: DistillSettings, n: int) -> dict[str, Any]:
    train, held = split_prompts(n, settings.seed, settings.heldout_fraction, settings.heldout_min)
    shards = []
    for split, idx in (("heldout", held), ("train", train)):
        for k in range(math.ceil(idx.size / settings.shard_size)):
            part = idx[k * settings.shard_size:(k + 1) * settings.shard_size]
            shards.append({"name": f"{split}-{k:05d}", "split": split,
                           "prompts": [int(i) for i in part]})
    return {"settings": asdict(settings), "num_prompts": n, "train": [int(i) for i in train],
            "heldout": [int(i) for i in held], "shards": shards}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_distill_set(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    folder: str | os.PathLike[str],
    settings: DistillSettings,
    *,
    eos_id: int | None,
    pad_id: int = 0,
    max_prompts: int | None = None,
    max_tokens: int | None = None,
    minutes: float | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = _log,
    generate: Callable[..., tuple[list[list[int]], list[torch.Tensor]]] = greedy_batch,
    reverse: bool = False,
) -> DistillSet:
    """Generate the shards of a distillation set that are not there yet (held-out first).

    The plan (a seeded split, fixed shards) covers every prompt; the limits only say where this
    run stops, always between shards, so a later run with a larger limit goes on from there.

    Args:
        model: the base causal LM (eval mode, on its device, in ``settings.dtype``).
        prompt_ids: every prompt's token ids (formatted already), in input order.
        folder: the set's folder (created; ``plan.json`` written on first use).
        settings: see :class:`DistillSettings` (its ``prompts`` hash should be
            :func:`hash_prompts` of ``prompt_ids``; checked against an existing plan).
        eos_id, pad_id: see :func:`greedy_batch`.
        max_prompts: stop once this many TRAIN prompts are done (held-out shards always run).
        max_tokens: stop once this many answer tokens (both splits) are done.
        minutes: this run's time box (wall minutes): a shard is started only if it should
            end inside it (judged by the last shard's seconds per prompt).
        progress: show a progress bar (rich) on a terminal.
        log: one line per batch and per shard (tokens/s); None for silence.
        generate: the batch generator (:func:`greedy_batch`; tests pass a double).
        reverse: take the missing shards last first (held-out last): a second process on
            another core then works from the other end of the plan (each process skips
            the shards whose file exists when it comes to them).

    Returns:
        The set as it stands after this run.

    Raises:
        ModelError: ``folder`` holds a plan with other settings.
    """
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    plan_file = root / "plan.json"
    if plan_file.is_file():
        existing = json.loads(plan_file.read_text(encoding="utf-8"))
        if existing.get("settings") != asdict(settings) or existing["num_prompts"] != len(
            prompt_ids
        ):
            raise ModelError(f"{str(root)!r} holds a distillation set with other settings")
    else:
        write_text_atomic(plan_file, json.dumps(_plan(settings, len(prompt_ids))) + "\n")
    dset = open_distill_set(root)
    start = time.monotonic()
    summary = dset.summary()
    train_prompts = summary["train_prompts"]
    tokens_total = summary["train_tokens"] + summary["heldout_tokens"]
    todo = [s for s in dset.plan["shards"] if s["name"] not in set(dset.done)]
    if reverse:
        todo.reverse()
    run_tokens = 0
    per_prompt = 0.0  # seconds per prompt of the last shard generated
    bar = _Bar(progress, sum(len(s["prompts"]) for s in todo))
    try:
        for spec in todo:
            if spec["split"] == "train":
                if max_prompts is not None and train_prompts >= max_prompts:
                    break
            if max_tokens is not None and tokens_total >= max_tokens:
                break
            if minutes is not None:
                # the last shard's seconds per prompt predict this one's: start it only if
                # it should end inside the box
                guess = per_prompt * len(spec["prompts"])
                if time.monotonic() - start + guess >= 60.0 * minutes:
                    break
            if dset.shard_path(spec["name"]).is_file():  # another process made it meanwhile
                if spec["name"] not in dset.done:
                    dset.done.append(spec["name"])
                continue
            t0 = time.monotonic()
            shard = _generate_shard(model, prompt_ids, spec["prompts"], settings, eos_id,
                                    pad_id, generate, bar, log, spec["name"])
            seconds = time.monotonic() - t0
            per_prompt = seconds / max(shard.num_prompts, 1)
            write_shard(dset.shard_path(spec["name"]), shard, {
                "prompts": str(shard.num_prompts), "tokens": str(shard.num_tokens),
                "seconds": f"{seconds:.1f}", "key": settings.key()})
            dset.done.append(spec["name"])
            run_tokens += shard.num_tokens
            tokens_total += shard.num_tokens
            if spec["split"] == "train":
                train_prompts += shard.num_prompts
            if log is not None:
                log(f"shard {spec['name']}: {shard.num_prompts} prompts, {shard.num_tokens} "
                    f"tokens in {seconds:.0f} s ({shard.num_tokens / max(seconds, 1e-9):.0f} "
                    f"tokens/s); this run {run_tokens} tokens in "
                    f"{time.monotonic() - start:.0f} s")
    finally:
        bar.close()
    order = {s["name"]: k for k, s in enumerate(dset.plan["shards"])}
    dset.done.sort(key=order.__getitem__)
    return dset


class _Bar:
    """A rich progress bar over prompts with a tokens/s field (only on a terminal)."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.progress: Any = None
        self.tokens = 0
        self.start = time.monotonic()
        if enabled and sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("distill"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), transient=False)
            self.progress.start()
            self.task = self.progress.add_task("distill", total=total, rate="")

    def advance(self, prompts: int, tokens: int) -> None:
        self.tokens += tokens
        if self.progress is not None:
            rate = self.tokens / max(time.monotonic() - self.start, 1e-9)
            self.progress.update(self.task, advance=prompts, rate=f"{rate:.0f} tokens/s")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _generate_shard(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    indices: Sequence[int],
    settings: DistillSettings,
    eos_id: int | None,
    pad_id: int,
    generate: Callable[..., tuple[list[list[int]], list[torch.Tensor]]],
    bar: _Bar,
    log: Callable[[str], None] | None,
    name: str,
) -> Shard:
    """Generate one shard: its prompts sorted by length, in batches of ``batch_size``."""
    order = sorted(indices, key=lambda i: (len(prompt_ids[i]), i))
    answers: dict[int, list[int]] = {}
    states: dict[int, torch.Tensor] = {}
    hidden_dtype = getattr(torch, settings.hidden_dtype)
    for k in range(0, len(order), settings.batch_size):
        batch = order[k:k + settings.batch_size]
        t0 = time.monotonic()
        ys, hs = generate(model, [prompt_ids[i] for i in batch], settings.max_new_tokens,
                          eos_id, pad_id)
        n = 0
        for i, y, h in zip(batch, ys, hs, strict=True):
            answers[i], states[i] = y, h.to(hidden_dtype)
            n += len(y)
        bar.advance(len(batch), n)
        if log is not None and not sys.stderr.isatty():
            seconds = time.monotonic() - t0
            log(f"  {name} batch {k // settings.batch_size}: {len(batch)} prompts "
                f"(length {len(prompt_ids[batch[0]])}-{len(prompt_ids[batch[-1]])}), {n} tokens "
                f"in {seconds:.1f} s ({n / max(seconds, 1e-9):.0f} tokens/s)")
    keep = list(indices)  # the plan's order
    return Shard(
        prompt_index=np.asarray(keep, dtype=np.int64),
        prompt_ids=np.concatenate([np.asarray(prompt_ids[i], dtype=np.int32) for i in keep]),
        prompt_offsets=_offsets([len(prompt_ids[i]) for i in keep]),
        answer_ids=np.concatenate([np.asarray(answers[i], dtype=np.int32) for i in keep]),
        answer_offsets=_offsets([len(answers[i]) for i in keep]),
        hidden=torch.cat([states[i] for i in keep]),
    )


# ------------------------------------------------------------------------------ top level


def default_threads() -> int:
    """1 torch thread when the machine is busy (load average > 1: spinning OpenMP threads
    then slow torch down several-fold), else every core."""
    try:
        busy = os.getloadavg()[0] > 1.0
    except OSError:
        busy = True
    return 1 if busy else (os.cpu_count() or 1)


def distill(
    base: str = "smollm2",
    prompt_files: Sequence[str | os.PathLike[str]] = (),
    *,
    folder: str | os.PathLike[str] | None = None,
    dtype: str = "float32",
    max_new_tokens: int = 192,
    batch_size: int = 32,
    shard_size: int = 256,
    seed: int = 0,
    heldout_fraction: float = 0.005,
    heldout_min: int = 200,
    max_prompts: int | None = None,
    max_tokens: int | None = None,
    minutes: float | None = None,
    threads: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = _log,
    reverse: bool = False,
) -> DistillSet:
    """Self-distillation data of a base model on prompt files: load, format, generate.

    Args:
        base: a known model name (``"smollm2"``), an HF folder or a GGUF file.
        prompt_files: JSON-lines files of ``{"source", "prompt"}`` (training prompts only).
        folder: where the set lives; default ``$BLOCKDRAFT_CACHE/distill/<key>``.
        dtype: the base's dtype while generating (float32 by default: on a CPU without
            native bfloat16 matrix units, bfloat16 measured 3-6x slower here).
        max_new_tokens, batch_size, shard_size, seed, heldout_fraction, heldout_min: see
            :class:`DistillSettings`.
        max_prompts, max_tokens, minutes: where this run stops (see :func:`build_distill_set`).
        threads: torch CPU threads (default :func:`default_threads`).
        progress, log, reverse: see :func:`build_distill_set`.

    Returns:
        The distillation set.
    """
    from blockdraft.models.hf.loading import load_causal_lm, resolve_base

    torch.set_num_threads(threads or default_threads())
    model, tokenizer = load_causal_lm(base, dtype)
    if tokenizer is None:
        raise ModelError(f"{base!r} has no tokenizer: cannot apply the chat template")
    t0 = time.monotonic()
    prompt_ids = format_prompts(tokenizer, read_prompts(prompt_files))
    if log is not None:
        log(f"formatted {len(prompt_ids)} prompts in {time.monotonic() - t0:.1f} s")
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos_id or 0)
    settings = DistillSettings(
        base=f"{base}|{resolve_base(base).name}", dtype=dtype, max_new_tokens=max_new_tokens,
        batch_size=batch_size, shard_size=shard_size, seed=seed,
        heldout_fraction=heldout_fraction, heldout_min=heldout_min,
        prompts=hash_prompts(prompt_ids))
    root = Path(folder) if folder is not None else cache_dir("distill", settings.key())
    if log is not None:
        log(f"distillation set {root} (threads {torch.get_num_threads()})")
    return build_distill_set(model, prompt_ids, root, settings, eos_id=eos_id, pad_id=pad_id,
                             max_prompts=max_prompts, max_tokens=max_tokens, minutes=minutes,
                             progress=progress, log=log, reverse=reverse)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m blockdraft.models.hf.distill``: build (or extend) a distillation set."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m blockdraft.models.hf.distill",
        description="Self-distillation data for Medusa heads: the base model's greedy answers "
                    "and final hidden states on training prompts (cached, resumable).")
    parser.add_argument("--base", default="smollm2", help="model name, HF folder or GGUF file")
    parser.add_argument("--prompts", nargs="+", required=True, help="JSON-lines prompt files")
    parser.add_argument("--folder", default=None, help="default $BLOCKDRAFT_CACHE/distill/<key>")
    parser.add_argument("--dtype", default="float32", help="the base's dtype (default float32)")
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--shard-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heldout-fraction", type=float, default=0.005)
    parser.add_argument("--heldout-min", type=int, default=200)
    parser.add_argument("--max-prompts", type=int, default=None, help="train prompts to reach")
    parser.add_argument("--max-tokens", type=int, default=None, help="answer tokens to reach")
    parser.add_argument("--minutes", type=float, default=None, help="time box of this run")
    parser.add_argument("--threads", type=int, default=None, help="default: 1 on a busy machine")
    parser.add_argument("--reverse", action="store_true",
                        help="missing shards last first (a second process on another core)")
    args = parser.parse_args(argv)
    dset = distill(args.base, args.prompts, folder=args.folder, dtype=args.dtype,
                   max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                   shard_size=args.shard_size, seed=args.seed,
                   heldout_fraction=args.heldout_fraction, heldout_min=args.heldout_min,
                   max_prompts=args.max_prompts, max_tokens=args.max_tokens,
                   minutes=args.minutes, threads=args.threads, reverse=args.reverse)
    print(json.dumps({"folder": str(dset.folder), **dset.summary()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
