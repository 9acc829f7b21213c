"""Medusa heads in every layout: files built here exactly as each layout documents them
(keys, shapes, dtypes, written with torch.save / safetensors) read back to heads whose logits
equal a direct computation; every layout round-trips; detection and refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from safetensors.torch import load_file, save_file

from blockdraft.models.errors import ModelError
from blockdraft.models.hf import MedusaHeads, detect_layout, read_heads, read_heads_config
from blockdraft.models.hf.formats import DIGEST_KEY, tensors_digest, write_heads

D, V, N = 8, 16, 3  # hidden size, vocabulary, Medusa heads


def rand(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 0.5).to(dtype)


Blocks = list[list[tuple[torch.Tensor, torch.Tensor | None]]]
"""Per head, per layer: (weight [d, d], bias [d] or None)."""


def reference(x: torch.Tensor, blocks: Blocks, projections: list[torch.Tensor]) -> torch.Tensor:
    """``[..., N, V]``: head j applies its blocks in order, then its projection."""
    out = []
    for j, head in enumerate(blocks):
        y = x
        for w, b in head:
            y = y + F.silu(y @ w.T + (0 if b is None else b))
        out.append(y @ projections[j].T)
    return torch.stack(out, dim=-2)


def logits(heads: MedusaHeads, x: torch.Tensor, lm_head: torch.Tensor | None = None
           ) -> torch.Tensor:
    linear = None
    if lm_head is not None:
        linear = torch.nn.Linear(D, V, bias=False)
        linear.weight.data.copy_(lm_head)
    with torch.no_grad():
        return heads.logits(heads(x.to(next(heads.parameters()).dtype)), linear)


def write_config(folder: Path, config: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))


X = rand(5, D, seed=99)


# ---- each layout as documented -------------------------------------------------------------


@pytest.mark.parametrize("tied", [True, False])
def test_medusa_1_heads_folder(tmp_path: Path, tied: bool) -> None:
    """``medusa_lm_head.pt``: ``{h}.{l}.linear.{weight,bias}``, ``{h}.{L}.weight``. Medusa's
    own ``[ResBlock] * L`` repeats one block's tensors under every l (``tied``)."""
    L = 2  # noqa: N806
    state: dict[str, torch.Tensor] = {}
    blocks: Blocks = []
    projections: list[torch.Tensor] = []
    for h in range(N):
        head: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        for layer in range(L):
            seed = 10 * h + (0 if tied else layer)
            w, b = rand(D, D, seed=seed), rand(D, seed=seed + 500)
            state[f"{h}.{layer}.linear.weight"], state[f"{h}.{layer}.linear.bias"] = w, b
            head.append((w, b))
        projections.append(rand(V, D, seed=900 + h))
        state[f"{h}.{L}.weight"] = projections[-1]
        blocks.append(head)
    folder = tmp_path / "medusa1"
    write_config(folder, {"medusa_num_heads": N, "medusa_num_layers": L,
                          "base_model_name_or_path": "lmsys/vicuna-7b-v1.3"})
    torch.save(state, folder / "medusa_lm_head.pt")
    assert detect_layout(folder) == "medusa-heads"
    cfg = read_heads_config(folder)
    assert (cfg.num_heads, cfg.num_layers, cfg.own_projection, cfg.base_model) == (
        N, L, True, "lmsys/vicuna-7b-v1.3")
    heads = read_heads(folder)
    assert heads.tie_layers is tied and heads.own_projection and heads.vocab_size == V
    torch.testing.assert_close(logits(heads, X), reference(X, blocks, projections))


def test_medusa_2_full_checkpoint(tmp_path: Path, hf_base: Any) -> None:
    """A whole model folder whose weights also hold ``medusa_head.{h}.{l}.linear.*`` and
    ``medusa_head.{h}.{L}.weight``; config.json adds medusa_num_heads / medusa_num_layers."""
    base = hf_base("gpt2")
    folder = tmp_path / "medusa2"
    base.save_pretrained(folder)
    d, vocab = 32, 200
    weights = load_file(str(folder / "model.safetensors"))
    blocks: Blocks = []
    projections: list[torch.Tensor] = []
    for h in range(2):
        w, b, proj = rand(d, d, seed=h), rand(d, seed=h + 50), rand(vocab, d, seed=h + 90)
        weights[f"medusa_head.{h}.0.linear.weight"] = w
        weights[f"medusa_head.{h}.0.linear.bias"] = b
        weights[f"medusa_head.{h}.1.weight"] = proj
        blocks.append([(w, b)])
        projections.append(proj)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    write_config(folder, {**config, "medusa_num_heads": 2, "medusa_num_layers": 1})
    assert detect_layout(folder) == "medusa-full"
    assert read_heads_config(folder).base_model == str(folder)
    heads = read_heads(folder)
    x = rand(4, d, seed=7)
    with torch.no_grad():
        got = heads.logits(heads(x))
    torch.testing.assert_close(got, reference(x, blocks, projections))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_medusa_version_2(tmp_path: Path, dtype: torch.dtype) -> None:
    """``"version": "2"`` + ``medusa_lm_head.safetensors`` with only the ResBlocks: the heads
    project with the base lm_head; projection keys, if any, are ignored (as TGI does)."""
    folder = tmp_path / "v2"
    write_config(folder, {"medusa_num_heads": N, "medusa_num_layers": 1, "version": "2",
                          "base_model_name_or_path": "smollm2"})
    state: dict[str, torch.Tensor] = {}
    blocks: Blocks = []
    for h in range(N):
        w, b = rand(D, D, seed=h, dtype=dtype), rand(D, seed=h + 40, dtype=dtype)
        state[f"{h}.0.linear.weight"], state[f"{h}.0.linear.bias"] = w, b
        blocks.append([(w.float(), b.float())])
    state["0.1.weight"] = rand(V, D, seed=3)  # ignored
    save_file(state, str(folder / "medusa_lm_head.safetensors"))
    assert detect_layout(folder) == "medusa-v2"
    heads = read_heads(folder)
    assert not heads.own_projection and heads.projections is None and heads.vocab_size is None
    assert next(heads.parameters()).dtype == dtype
    lm_head = rand(V, D, seed=77)
    got = logits(heads.float(), X, lm_head)
    torch.testing.assert_close(got, reference(X, blocks, [lm_head] * N))


@pytest.mark.parametrize(("bias", "original_lm_head"), [(False, False), (True, True)])
def test_vllm_layout(tmp_path: Path, bias: bool, original_lm_head: bool) -> None:
    """``blocks.{h}.layers.{l}.weight`` (``.bias`` only with medusa_fc_bias),
    ``lm_heads.{h}.weight`` (one, shared, with original_lm_head); distinct layers apply in
    order."""
    L = 2  # noqa: N806
    folder = tmp_path / "vllm"
    config: dict[str, Any] = {"model_type": "medusa", "architectures": ["MedusaModel"],
                              "hidden_size": D, "vocab_size": V, "num_heads": N,
                              "num_hidden_layers": L}
    if bias:
        config["medusa_fc_bias"] = True
    if original_lm_head:
        config["original_lm_head"] = True
    write_config(folder, config)
    state: dict[str, torch.Tensor] = {}
    blocks: Blocks = []
    projections: list[torch.Tensor] = []
    for h in range(N):
        head: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        for layer in range(L):
            w = rand(D, D, seed=20 * h + layer)
            b = rand(D, seed=20 * h + layer + 300) if bias else None
            state[f"blocks.{h}.layers.{layer}.weight"] = w
            if b is not None:
                state[f"blocks.{h}.layers.{layer}.bias"] = b
            head.append((w, b))
        blocks.append(head)
        if h == 0 or not original_lm_head:
            state[f"lm_heads.{h}.weight"] = rand(V, D, seed=600 + h)
        projections.append(state["lm_heads.0.weight" if original_lm_head else
                                 f"lm_heads.{h}.weight"])
    save_file(state, str(folder / "model.safetensors"))
    assert detect_layout(folder) == "vllm"
    heads = read_heads(folder)
    assert heads.bias is bias and not heads.tie_layers and heads.own_projection
    if original_lm_head:
        assert heads.projection(0) is heads.projection(2)
    torch.testing.assert_close(logits(heads, X), reference(X, blocks, projections))


# ---- round trips ---------------------------------------------------------------------------


def random_heads(own: bool, layers: int = 2, tie: bool = False, bias: bool = True,
                 dtype: torch.dtype = torch.float32) -> MedusaHeads:
    heads = MedusaHeads(D, V if own else None, N, layers, own, bias=bias, tie_layers=tie)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return heads.to(dtype)


@pytest.mark.parametrize(("layout", "own", "tie", "bias"), [
    ("medusa-heads", True, True, True),
    ("medusa-heads", True, False, True),
    ("medusa-heads", False, False, True),  # shared heads get copies of the lm_head
    ("medusa-v2", False, True, True),
    ("medusa-v2", False, False, True),
    ("vllm", True, False, False),
    ("vllm", True, True, True),
    ("vllm", False, False, True),  # stored once, as original_lm_head
])
def test_every_layout_round_trips(tmp_path: Path, layout: str, own: bool, tie: bool,
                                  bias: bool) -> None:
    heads = random_heads(own, tie=tie, bias=bias)
    lm_head = rand(V, D, seed=31)
    folder = write_heads(heads, tmp_path / layout, layout, base_model="smollm2",
                         lm_head=None if own else lm_head)
    assert detect_layout(folder) == layout
    back = read_heads(folder, layout=layout)
    assert (back.num_heads, back.num_layers, back.tie_layers) == (N, 2, tie)
    expected = logits(heads, X, None if own else lm_head)
    got = logits(back, X, None if back.own_projection else lm_head)
    torch.testing.assert_close(got, expected)
    if layout != "vllm":
        assert read_heads_config(folder).base_model == "smollm2"


def test_medusa_full_round_trip(tmp_path: Path, hf_base: Any) -> None:
    base = hf_base("llama")
    heads = MedusaHeads(64, 256, 2, 1, own_projection=True)
    folder = write_heads(heads, tmp_path / "full", "medusa-full", base=base)
    assert detect_layout(folder) == "medusa-full"
    back = read_heads(folder)
    for a, b in zip(heads.state_dict().values(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    config = json.loads((folder / "config.json").read_text())
    assert config["medusa_num_heads"] == 2 and config["model_type"] == "llama"


def test_bfloat16_heads_keep_their_dtype(tmp_path: Path) -> None:
    heads = random_heads(False, layers=1, dtype=torch.bfloat16)
    back = read_heads(write_heads(heads, tmp_path / "bf16"))  # default layout: medusa-v2
    assert all(p.dtype == torch.bfloat16 for p in back.parameters())
    for a, b in zip(heads.state_dict().values(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_writing_replaces_a_folder_as_a_whole(tmp_path: Path) -> None:
    folder = tmp_path / "heads"
    write_heads(random_heads(True), folder, "medusa-heads")
    write_heads(random_heads(False), folder, "medusa-v2")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json",
                                                         "medusa_lm_head.safetensors"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no leftovers


# ---- refusals ------------------------------------------------------------------------------


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="must be a folder"):
        detect_layout(tmp_path / "nothing")
    with pytest.raises(ModelError, match="has no config.json"):
        detect_layout(tmp_path)
    write_config(tmp_path / "llama", {"model_type": "llama"})
    with pytest.raises(ModelError, match="not a Medusa heads folder"):
        detect_layout(tmp_path / "llama")
    write_config(tmp_path / "empty", {"medusa_num_heads": 2})
    with pytest.raises(ModelError, match="neither medusa_lm_head"):
        detect_layout(tmp_path / "empty")
    with pytest.raises(ModelError, match="their own projections"):
        write_heads(random_heads(True), tmp_path / "x", "medusa-v2")
    with pytest.raises(ModelError, match="pass lm_head"):
        write_heads(random_heads(False), tmp_path / "x", "medusa-heads")
    with pytest.raises(ModelError, match="unknown heads layout 'eagle'"):
        write_heads(random_heads(False), tmp_path / "x", "eagle")
    with pytest.raises(ModelError, match="pass base="):
        write_heads(random_heads(True), tmp_path / "x", "medusa-full")

    folder = write_heads(random_heads(False, layers=1), tmp_path / "v2")
    state = {"0.0.linear.weight": rand(D, D, seed=1), "0.0.linear.bias": rand(D, seed=2),
             "1.0.linear.weight": rand(D, D + 1, seed=3), "1.0.linear.bias": rand(D, seed=4)}
    save_file(state, str(folder / "medusa_lm_head.safetensors"))
    with pytest.raises(ModelError, match=r"'1.0.linear.weight' has shape \(8, 9\), "
                                         r"expected \(8, 8\)"):
        read_heads(folder)
    del state["1.0.linear.weight"]
    save_file(state, str(folder / "medusa_lm_head.safetensors"))
    with pytest.raises(ModelError, match="missing tensor '1.0.linear.weight'"):
        read_heads(folder)
    with pytest.raises(ModelError, match="holds the 'medusa-v2' layout, not 'vllm'"):
        read_heads(folder, layout="vllm")

    vllm = write_heads(random_heads(True), tmp_path / "vllm", "vllm")
    config = json.loads((vllm / "config.json").read_text())
    write_config(vllm, {**config, "truncated_vocab_size": V - 4})
    with pytest.raises(ModelError, match="truncated vocabulary"):
        read_heads(vllm)


# ---- integrity -----------------------------------------------------------------------------


def _metadata(file: Path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as f:
        return dict(f.metadata() or {})


@pytest.mark.parametrize(("layout", "file", "dtype"), [
    ("medusa-v2", "medusa_lm_head.safetensors", torch.float32),
    ("medusa-v2", "medusa_lm_head.safetensors", torch.bfloat16),
    ("vllm", "model.safetensors", torch.float32),
])
def test_written_heads_carry_the_digest_of_their_tensors(tmp_path: Path, layout: str, file: str,
                                                         dtype: torch.dtype) -> None:
    """Issue 13 item 5: blockdraft's heads files are sealed; a changed tensor is refused."""
    heads = random_heads(layout == "vllm", layers=1, dtype=dtype)
    folder = write_heads(heads, tmp_path / "heads", layout)
    recorded = _metadata(folder / file)[DIGEST_KEY]
    assert recorded == tensors_digest(load_file(str(folder / file)))
    assert read_heads(folder).num_heads == N
    data = bytearray((folder / file).read_bytes())
    data[-4] ^= 1  # one bit of the last tensor value
    (folder / file).write_bytes(bytes(data))
    with pytest.raises(ModelError, match=rf"{file}: its tensors' SHA-256 .* recorded in its "
                                         r"metadata .* changed or corrupted"):
        read_heads(folder)


def test_heads_without_a_digest_still_load(tmp_path: Path) -> None:
    """Heads of other tools (and the packaged SmolLM2 heads, written before digests) have no
    digest in their metadata: read as before, unchecked."""
    folder = write_heads(random_heads(False, layers=1), tmp_path / "heads")
    file = folder / "medusa_lm_head.safetensors"
    state = load_file(str(file))
    state["0.0.linear.bias"] = state["0.0.linear.bias"] + 1  # a TGI user's own heads, say
    save_file(state, str(file), metadata={"format": "pt"})
    back = read_heads(folder)
    assert torch.equal(back.block(0, 0).linear.bias.detach(), state["0.0.linear.bias"])


def test_the_packaged_smollm2_heads_load() -> None:
    from blockdraft.models.load import packaged_heads

    folder = packaged_heads("smollm2")
    heads = read_heads(folder)
    assert heads.num_heads >= 1 and not heads.own_projection
    recorded = _metadata(folder / "medusa_lm_head.safetensors").get(DIGEST_KEY)
    if recorded is not None:  # once rewritten by write_heads
        assert recorded == tensors_digest(load_file(str(folder / "medusa_lm_head.safetensors")))


def test_the_packaged_smollm2_prefix_heads_load() -> None:
    """The known name smollm2-prefix ships prefix heads for SmolLM2 (d = 576) with their
    shortlist, sealed by their digest (read_prefix_heads checks it)."""
    from blockdraft.models.hf.prefix_heads import read_prefix_heads
    from blockdraft.models.load import packaged_heads

    heads = read_prefix_heads(packaged_heads("smollm2-prefix"))
    assert heads.num_heads == 5 and heads.d_model == 576
    assert heads.shortlist is not None and heads.shortlist.numel() == 4096
    assert any(float(p.weight.abs().sum()) > 0 for p in heads.prefix)  # trained: not Medusa


def test_the_packaged_smollm2_eagle_layer_loads() -> None:
    """The known name smollm2-eagle ships a trained EAGLE-1 draft layer for SmolLM2 (d = 576),
    sealed by its digest (read_eagle checks it), with its shortlist and the recipe that sets
    its depth and the default's tree."""
    from blockdraft.models.hf.eagle_heads import read_eagle_heads
    from blockdraft.models.load import packaged_heads

    heads = read_eagle_heads(packaged_heads("smollm2-eagle"))
    assert heads.num_heads == 6 and heads.d_model == 576 and heads.context == "answer"
    assert heads.shortlist is not None and heads.shortlist.numel() == 4096
    assert heads.layer.config.fusion == "top"
    recipe = heads.drafting
    assert recipe is not None and (recipe.k, recipe.max_nodes, recipe.copy_length) == (4, 32, 16)
    assert recipe.acceptance is not None and recipe.acceptance.is_file()
    assert recipe.draft_precision == "q4"  # its weights on ONNX Runtime: the fastest measured


def test_sealed_heads_must_match_their_config(tmp_path: Path) -> None:
    folder = write_heads(random_heads(False, layers=2), tmp_path / "heads")
    config = json.loads((folder / "config.json").read_text())
    write_config(folder, {**config, "medusa_num_heads": N - 1})
    with pytest.raises(ModelError, match=r"sealed by blockdraft does not match config.json "
                                         r"\(4 tensors it does not name"):
        read_heads(folder)
    write_config(folder, {**config, "medusa_num_heads": 2**40})  # refused before listing them
    with pytest.raises(ModelError, match="describes 1099511627776 heads of 2 layers"):
        read_heads(folder)
    write_config(folder, {**config, "base_model_name_or_path": "/my/copy/of/smollm2"})
    assert read_heads(folder).num_heads == N
