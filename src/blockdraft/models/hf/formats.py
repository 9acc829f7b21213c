"""Medusa heads in the checkpoint layouts people have: read and write.

The layouts (``"medusa-heads"``, ``"medusa-full"``, ``"medusa-v2"``, ``"vllm"``), what each
folder holds and how one is recognised: :mod:`.layouts`. This module reads the heads of any of
them and writes any of them.

Tied layers. Medusa's own code builds a head as ``[ResBlock(d)] * L``: one module listed ``L``
times, so its files repeat the same tensors under every ``l`` and its forward applies that one
block ``L`` times. When every head's ``L`` blocks in a file are identical, :func:`read_heads`
returns heads with ``tie_layers=True`` (one block applied ``L`` times, the same function and
the same training semantics as Medusa's). When they differ, every block is applied in order
(``tie_layers=False``), as TGI and vLLM do; Medusa's own loader would instead apply the LAST
block ``L`` times (``load_state_dict`` into the shared module keeps the last copy), which
cannot be what the file's writer meant. With ``L = 1`` there is no difference.

Every file is written atomically: a heads folder is built beside its destination and swapped
into place (:func:`blockdraft.core.files.atomic_directory`).

Integrity. The safetensors heads file blockdraft writes (``"medusa-v2"``, ``"vllm"``) carries
in its metadata (which Medusa, TGI and vLLM ignore) the SHA-256 of its tensors, names, dtypes
and shapes included (:data:`DIGEST_KEY`). :func:`read_heads` checks it when it is there, and
then also requires the file to hold exactly the tensors ``config.json`` describes (a config
edited to fewer heads or layers must not drop some silently). Heads written by other tools
have no digest and are read as before: those layouts are interchange formats, and a changed
value in them cannot be told from the real one. ``config.json`` itself is left unsealed
(other tools read it and users point its ``base_model_name_or_path`` elsewhere); the sizes it
gives are checked against the sealed tensors instead (the digest: :mod:`.tensor_digest`).

Public surface:
    read_heads(path, layout=None) -> MedusaHeads
    write_heads(heads, path, layout="medusa-v2", *, base_model=None, lm_head=None, base=None)

Shortlist. Version-2 heads may carry a draft vocabulary (:mod:`.shortlist`): read with them,
written with them (``shortlist.safetensors`` and a ``config.json`` entry other tools ignore).

Also importable from here, as before (their homes are :mod:`.layouts` and
:mod:`.tensor_digest`): ``LAYOUTS``, ``CONFIG_FILE``, ``HEADS_FILES``, ``FULL_PREFIX``,
``HeadsConfig``, ``detect_layout``, ``read_heads_config``, ``DIGEST_KEY``, ``tensors_digest``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from blockdraft.core.files import atomic_directory, write_text_atomic
from blockdraft.models.errors import ModelError
from blockdraft.models.hf.drafting import read_drafting
from blockdraft.models.hf.layouts import (
    CONFIG_FILE,
    FULL_PREFIX,
    HEADS_FILES,
    LAYOUTS,
    WEIGHT_FILES,
    HeadsConfig,
    detect_layout,
    read_config,
    read_heads_config,
    weight_files,
)
from blockdraft.models.hf.medusa import MedusaHeads
from blockdraft.models.hf.shortlist import CONFIG_KEY as SHORTLIST_KEY
from blockdraft.models.hf.shortlist import read_shortlist, shortlist_files
from blockdraft.models.hf.tensor_digest import DIGEST_KEY, tensors_digest

__all__ = [  # the layouts' and the digest's names stay importable from here
    "CONFIG_FILE",
    "DIGEST_KEY",
    "FULL_PREFIX",
    "HEADS_FILES",
    "LAYOUTS",
    "HeadsConfig",
    "detect_layout",
    "read_heads",
    "read_heads_config",
    "tensors_digest",
    "write_heads",
]


# ---- reading -----------------------------------------------------------------------------------


def _load_tensors(file: Path, wanted: Callable[[str], bool] | None = None
                  ) -> tuple[dict[str, torch.Tensor], bool]:
    """The tensors of a ``.safetensors`` or ``torch.save`` file whose key satisfies ``wanted``
    (a predicate; None: all), on the CPU; and whether the file's digest (:data:`DIGEST_KEY`,
    checked only when every tensor is read) was there and matched.

    Raises:
        ModelError: an unreadable file, or one whose tensors differ from its digest.
    """
    keep = wanted or (lambda key: True)
    try:
        if file.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(file), framework="pt") as f:
                state = {k: f.get_tensor(k) for k in f.keys() if keep(k)}
                recorded = (f.metadata() or {}).get(DIGEST_KEY)
        else:
            loaded = torch.load(file, map_location="cpu", weights_only=True)
            recorded = None
    except Exception as e:  # noqa: BLE001 - safetensors/pickle raise many kinds
        raise ModelError(f"cannot read the weights file {file}: {e}") from e
    if file.suffix == ".safetensors":
        if recorded is None or wanted is not None:
            return state, False
        actual = tensors_digest(state)
        if actual != recorded:
            raise ModelError(
                f"{file}: its tensors' SHA-256 ({actual[:12]}...) is not the one recorded in "
                f"its metadata when blockdraft wrote it ({str(recorded)[:12]}...): the file was "
                "changed or corrupted since; write the heads again (write_heads)"
            )
        return state, True
    if not isinstance(loaded, dict):
        raise ModelError(f"{file} must hold a dict of tensors, got {type(loaded).__name__}")
    return {str(k): v for k, v in loaded.items()
            if keep(str(k)) and isinstance(v, torch.Tensor)}, False


def _heads_state(folder: Path, layout: str) -> tuple[dict[str, torch.Tensor], bool]:
    """The raw tensors of the heads, keys as the layout writes them (without prefixes), and
    whether they were sealed by a digest that matched (every file read whole and sealed)."""
    if layout in ("medusa-heads", "medusa-v2"):
        for name in HEADS_FILES:
            if (folder / name).is_file():
                return _load_tensors(folder / name)
        raise ModelError(f"{str(folder)!r} has no {' or '.join(HEADS_FILES)}")
    files = weight_files(folder)
    if not files:
        raise ModelError(f"{str(folder)!r} has no model weights ({', '.join(WEIGHT_FILES)})")
    state: dict[str, torch.Tensor] = {}
    if layout == "medusa-full":
        for file in files:
            part, _ = _load_tensors(file, lambda k: k.startswith(FULL_PREFIX))
            state.update({k[len(FULL_PREFIX):]: v for k, v in part.items()})
        return state, False
    sealed = True
    for file in files:  # vllm: some exports put everything under "medusa_heads."
        part, ok = _load_tensors(file)
        sealed = sealed and ok
        state.update({k.removeprefix("medusa_heads."): v for k, v in part.items()})
    return state, sealed


def _check_sealed_keys(state: dict[str, torch.Tensor], wanted: set[str], where: str) -> None:
    """Heads sealed by blockdraft hold exactly the tensors their config describes: a config
    edited to fewer heads or layers must not leave tensors silently unread."""
    extra, missing = sorted(set(state) - wanted), sorted(wanted - set(state))
    parts = [f"{len(extra)} tensors it does not name, e.g. {extra[0]!r}"] if extra else []
    parts += [f"no {missing[0]!r}"] if missing else []
    if parts:
        raise ModelError(
            f"{where}: the heads file sealed by blockdraft does not match config.json ("
            f"{'; '.join(parts)}): the config was changed since the heads were written; write "
            "the heads again (write_heads)"
        )


def _take(state: dict[str, torch.Tensor], key: str, shape: tuple[int, ...], where: str
          ) -> torch.Tensor:
    if key not in state:
        raise ModelError(f"{where}: missing tensor {key!r}")
    tensor = state[key]
    if tuple(tensor.shape) != shape:
        raise ModelError(f"{where}: {key!r} has shape {tuple(tensor.shape)}, expected {shape}")
    return tensor


def _same(a: tuple[torch.Tensor, torch.Tensor | None],
          b: tuple[torch.Tensor, torch.Tensor | None]) -> bool:
    """Whether two blocks' (weight, bias) are identical."""
    if not torch.equal(a[0], b[0]):
        return False
    return (a[1] is None and b[1] is None) or (
        a[1] is not None and b[1] is not None and torch.equal(a[1], b[1]))


def _build(
    cfg: HeadsConfig,
    blocks: dict[tuple[int, int], tuple[str, str | None]],
    projections: dict[int, str] | None,
    state: dict[str, torch.Tensor],
    where: str,
) -> MedusaHeads:
    """MedusaHeads from a state dict, given each block's (weight key, bias key or None) and
    each head's projection key (None: the base ``lm_head``)."""
    first_key = blocks[0, 0][0]
    if first_key not in state:
        raise ModelError(f"{where}: missing tensor {first_key!r}")
    first = state[first_key]
    if first.dim() != 2 or first.shape[0] != first.shape[1]:
        raise ModelError(f"{where}: {first_key!r} must be a square [d, d] matrix, got "
                         f"{tuple(first.shape)}")
    d = int(first.shape[0])
    weights: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor | None]] = {}
    for (h, layer), (wkey, bkey) in blocks.items():
        w = _take(state, wkey, (d, d), where)
        b = None if bkey is None else _take(state, bkey, (d,), where)
        weights[h, layer] = (w, b)
    vocab: int | None = None
    proj: dict[int, torch.Tensor] = {}
    if projections is not None:
        pkey = projections[0]
        if pkey not in state:
            raise ModelError(f"{where}: missing tensor {pkey!r}")
        vocab = int(state[pkey].shape[0])
        proj = {h: _take(state, key, (vocab, d), where) for h, key in projections.items()}
    n, L = cfg.num_heads, cfg.num_layers  # noqa: N806
    tie = L > 1 and all(
        _same(weights[h, layer], weights[h, 0]) for h in range(n) for layer in range(1, L)
    )
    heads = MedusaHeads(d, vocab, n, L, projections is not None, bias=cfg.bias, tie_layers=tie)
    heads.to(first.dtype)
    with torch.no_grad():
        for h in range(n):
            for layer in range(1 if tie else L):
                w, b = weights[h, layer]
                linear = heads.block(h, layer).linear
                linear.weight.copy_(w)
                if linear.bias is not None:
                    linear.bias.copy_(b if b is not None else torch.zeros(d))
        if heads.projections is not None:
            shared = projections is not None and len(set(projections.values())) == 1 and n > 1
            if shared:  # vLLM's original_lm_head: one matrix for every head
                module = heads.projections[0]
                heads.projections = torch.nn.ModuleList([module] * n)
            for h in range(1 if shared else n):
                heads.projection(h).weight.copy_(proj[h])
    return heads


def read_heads(path: str | os.PathLike[str], layout: str | None = None) -> MedusaHeads:
    """The Medusa heads stored in a folder of any layout, in the file's dtype, on the CPU.

    Args:
        path: the heads folder (for ``"medusa-full"``: the whole model's folder).
        layout: one of :data:`LAYOUTS`; default :func:`detect_layout`.

    Raises:
        ModelError: an unknown layout, a missing or misshapen tensor (named), or a config the
            layout does not allow.
    """
    folder = Path(path)
    cfg = read_heads_config(folder)
    if layout is not None and layout != cfg.layout:
        if layout not in LAYOUTS:
            raise ModelError(f"unknown heads layout {layout!r}; use one of {', '.join(LAYOUTS)}")
        raise ModelError(f"{str(folder)!r} holds the {cfg.layout!r} layout, not {layout!r}")
    state, sealed = _heads_state(folder, cfg.layout)
    where = f"{folder} ({cfg.layout})"
    n, L = cfg.num_heads, cfg.num_layers  # noqa: N806
    if n * L > len(state):  # each block has a weight: refuse before listing n * L of them
        raise ModelError(
            f"{where}: config.json describes {n} heads of {L} layers ({n * L} blocks), but the "
            f"weights hold only {len(state)} tensors"
        )
    if cfg.layout == "vllm":
        if "token_map" in state:
            raise ModelError(f"{where}: a token_map (truncated draft vocabulary) is not supported")
        config = read_config(folder)
        blocks = {(h, layer): (f"blocks.{h}.layers.{layer}.weight",
                           f"blocks.{h}.layers.{layer}.bias" if cfg.bias else None)
                  for h in range(n) for layer in range(L)}
        shared = bool(config.get("original_lm_head", False))
        projections = {h: "lm_heads.0.weight" if shared else f"lm_heads.{h}.weight"
                       for h in range(n)}
        if sealed:
            _check_sealed_keys(state, _keys(blocks, projections), where)
        return _build(cfg, blocks, projections, state, where)
    blocks = {(h, layer): (f"{h}.{layer}.linear.weight", f"{h}.{layer}.linear.bias")
              for h in range(n) for layer in range(L)}
    own = None if cfg.layout == "medusa-v2" else {h: f"{h}.{L}.weight" for h in range(n)}
    if sealed:
        _check_sealed_keys(state, _keys(blocks, own), where)
    heads = _build(cfg, blocks, own, state, where)
    found = read_shortlist(folder) if cfg.layout == "medusa-v2" else None
    if found is not None:
        heads.set_shortlist(found[0], info=found[1])
    heads.use_recipe(read_drafting(folder))
    return heads


def _keys(blocks: dict[tuple[int, int], tuple[str, str | None]],
          projections: dict[int, str] | None) -> set[str]:
    """Every tensor key a layout's blocks and projections name."""
    keys = {k for pair in blocks.values() for k in pair if k is not None}
    return keys | set((projections or {}).values())


# ---- writing -----------------------------------------------------------------------------------


def _medusa_state(heads: MedusaHeads, lm_head: torch.Tensor | None, projections: bool,
                  prefix: str = "") -> dict[str, torch.Tensor]:
    """Medusa's keys: ``{h}.{layer}.linear.{weight,bias}`` and (``projections``) ``{h}.{L}.weight``.
    Every tensor is its own contiguous CPU copy (safetensors refuses shared memory)."""
    state: dict[str, torch.Tensor] = {}
    L = heads.num_layers  # noqa: N806
    for h in range(heads.num_heads):
        for layer in range(L):
            linear = heads.block(h, layer).linear
            weight = linear.weight.detach()
            bias = linear.bias.detach() if linear.bias is not None else torch.zeros_like(
                weight[0])  # Medusa's blocks always have a bias: a missing one is zero
            state[f"{prefix}{h}.{layer}.linear.weight"] = weight.cpu().contiguous().clone()
            state[f"{prefix}{h}.{layer}.linear.bias"] = bias.cpu().contiguous().clone()
        if projections:
            state[f"{prefix}{h}.{L}.weight"] = _projection(heads, h, lm_head)
    return state


def _projection(heads: MedusaHeads, h: int, lm_head: torch.Tensor | None) -> torch.Tensor:
    if heads.projections is not None:
        weight = heads.projection(h).weight.detach()
    elif lm_head is not None:
        weight = lm_head.detach()
    else:
        raise ModelError(
            "these heads share the base lm_head, and this layout stores a projection per "
            "head: pass lm_head (the base's lm_head weight [V, d]) or write layout 'medusa-v2'"
        )
    return weight.cpu().contiguous().clone()


def _save_safetensors(state: dict[str, torch.Tensor], file: Path, sealed: bool = True) -> None:
    """Write ``state``; ``sealed``: with its :func:`tensors_digest` in the metadata."""
    from safetensors.torch import save_file

    metadata = {"format": "pt"}
    if sealed:
        metadata[DIGEST_KEY] = tensors_digest(state)
    save_file(state, str(file), metadata=metadata)


def _write_json(file: Path, data: dict[str, Any]) -> None:
    write_text_atomic(file, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_heads(
    heads: MedusaHeads,
    path: str | os.PathLike[str],
    layout: str = "medusa-v2",
    *,
    base_model: str | None = None,
    lm_head: torch.Tensor | None = None,
    base: Any = None,
) -> Path:
    """Write ``heads`` as a folder of ``layout``, replacing ``path`` atomically.

    Args:
        heads: the heads (their dtype is kept).
        path: the folder to create (an existing one is replaced as a whole).
        layout: one of :data:`LAYOUTS`.
        base_model: ``base_model_name_or_path`` to record (a folder, hub id or blockdraft
            name such as ``"smollm2"``); default empty (vLLM: omitted).
        lm_head: the base's ``lm_head`` weight ``[V, d]``, needed to store heads that share it
            in a layout with a projection per head (``"medusa-heads"``; ``"vllm"`` stores it
            once with ``original_lm_head``).
        base: the base ``transformers`` model, needed for ``"medusa-full"`` (its weights and
            config are written too; shared heads get copies of its ``lm_head``).

    Returns:
        ``path``.

    Raises:
        ModelError: an unknown layout; ``"medusa-v2"`` for heads with their own projections;
            a missing ``lm_head`` or ``base``.
    """
    if not isinstance(heads, MedusaHeads):
        raise ModelError(f"heads must be MedusaHeads, got {type(heads).__name__}")
    if layout not in LAYOUTS:
        raise ModelError(f"unknown heads layout {layout!r}; use one of {', '.join(LAYOUTS)}")
    folder = Path(path)
    folder.parent.mkdir(parents=True, exist_ok=True)
    medusa_config = {"medusa_num_heads": heads.num_heads, "medusa_num_layers": heads.num_layers,
                     "base_model_name_or_path": base_model or ""}
    if layout == "medusa-v2":
        if heads.own_projection:
            raise ModelError(
                "Medusa version-2 heads share the base lm_head, but these heads have their own "
                "projections; write layout 'medusa-heads' or 'vllm' instead"
            )
        config: dict[str, Any] = {**medusa_config, "version": "2"}
        with atomic_directory(folder) as tmp:
            _save_safetensors(_medusa_state(heads, None, projections=False),
                              tmp / "medusa_lm_head.safetensors")
            if heads.shortlist is not None:
                tensors, entry = shortlist_files(heads.shortlist, heads.shortlist_info)
                _save_safetensors(tensors, tmp / entry["file"])
                config[SHORTLIST_KEY] = entry
            _write_json(tmp / CONFIG_FILE, config)
        return folder
    if layout == "medusa-heads":
        state = _medusa_state(heads, lm_head, projections=True)
        with atomic_directory(folder) as tmp:
            torch.save(state, tmp / "medusa_lm_head.pt")
            _write_json(tmp / CONFIG_FILE, medusa_config)
        return folder
    if layout == "vllm":
        return _write_vllm(heads, folder, base_model, lm_head)
    return _write_full(heads, folder, base)


def _write_vllm(heads: MedusaHeads, folder: Path, base_model: str | None,
                lm_head: torch.Tensor | None) -> Path:
    state: dict[str, torch.Tensor] = {}
    for h in range(heads.num_heads):
        for layer in range(heads.num_layers):
            linear = heads.block(h, layer).linear
            state[f"blocks.{h}.layers.{layer}.weight"] = linear.weight.detach().cpu().clone()
            if linear.bias is not None:
                state[f"blocks.{h}.layers.{layer}.bias"] = linear.bias.detach().cpu().clone()
    shared = heads.projections is None
    for h in range(1 if shared else heads.num_heads):
        state[f"lm_heads.{h}.weight"] = _projection(heads, h, lm_head)
    vocab, d = state["lm_heads.0.weight"].shape
    config: dict[str, Any] = {
        "model_type": "medusa", "architectures": ["MedusaModel"], "hidden_size": int(d),
        "vocab_size": int(vocab), "truncated_vocab_size": int(vocab),
        "num_heads": heads.num_heads, "num_hidden_layers": heads.num_layers,
        "medusa_fc_bias": heads.bias, "original_lm_head": shared,
    }
    if base_model:
        config["base_model_name_or_path"] = base_model
    with atomic_directory(folder) as tmp:
        _save_safetensors(state, tmp / "model.safetensors")
        _write_json(tmp / CONFIG_FILE, config)
    return folder


def _write_full(heads: MedusaHeads, folder: Path, base: Any) -> Path:
    if base is None or not callable(getattr(base, "save_pretrained", None)):
        raise ModelError("a Medusa-2 full checkpoint holds the base model too: pass base=")
    lm_head = base.get_output_embeddings().weight
    state = _medusa_state(heads, lm_head, projections=True, prefix=FULL_PREFIX)
    with atomic_directory(folder) as tmp:
        base.save_pretrained(str(tmp))
        single = tmp / "model.safetensors"
        index = tmp / "model.safetensors.index.json"
        if single.is_file():
            from safetensors.torch import load_file

            _save_safetensors({**load_file(str(single)), **state}, single, sealed=False)
        elif index.is_file():
            shard = "medusa_head.safetensors"
            _save_safetensors(state, tmp / shard, sealed=False)
            data = json.loads(index.read_text(encoding="utf-8"))
            data["weight_map"].update({k: shard for k in state})
            _write_json(index, data)
        else:
            raise ModelError(f"save_pretrained wrote no safetensors weights into {tmp}")
        config = json.loads((tmp / CONFIG_FILE).read_text(encoding="utf-8"))
        config.update(medusa_num_heads=heads.num_heads, medusa_num_layers=heads.num_layers)
        _write_json(tmp / CONFIG_FILE, config)
    return folder

