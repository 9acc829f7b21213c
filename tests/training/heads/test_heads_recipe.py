"""The end-to-end heads recipe (training/heads/recipe): the trained heads written in Medusa
version-2 layout with their curve; a ``slow`` test retrains heads on SmolLM2 with a small
budget.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from heads_testlib import SHARED_PROMPTS, TRAIN, tiny_llama  # noqa: E402

from blockdraft.models.hf import MedusaHeads, read_heads, write_heads  # noqa: E402
from blockdraft.training.heads import (  # noqa: E402
    HeadsTrainSettings,
    lm_head_weight,
    train_heads,
    write_trained_heads,
)


def test_trained_heads_are_written_in_medusa_v2_layout(dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    result = train_heads(dataset, lm_head, tmp_path / "w", TRAIN, log=None, progress=False)
    folder = write_trained_heads(result, tmp_path / "heads", "tiny", "# heads\n")
    assert json.loads((folder / "config.json").read_text())["version"] == "2"
    assert (folder / "README.md").is_file() and (folder / "curve.png").stat().st_size > 0
    back = read_heads(folder)
    assert back.num_heads == 3
    for (name, a), (_, b) in zip(result.heads.state_dict().items(),
                                 back.state_dict().items(), strict=True):
        assert b.dtype == torch.bfloat16, name
        torch.testing.assert_close(b.float(), a.to(torch.bfloat16).float())


# ------------------------------------------------------------------------------ real model


@pytest.mark.slow
@pytest.mark.needs_data
def test_smollm2_heads_learn_well_above_chance(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    files = sorted(SHARED_PROMPTS.glob("distill_prompts.part0*.jsonl"))
    if not files:
        pytest.skip("no distillation prompts under ../shared/data/prompts")
    from blockdraft.training.heads.recipe import train_medusa_heads

    torch.set_num_threads(1)
    result = train_medusa_heads(
        "smollm2", files[:1], tmp_path / "heads", heads=2, max_prompts=48, max_new_tokens=64,
        heldout_min=24, heldout_fraction=0.0, batch_size=24, shard_size=24,
        data=tmp_path / "data",
        work=tmp_path / "work",
        settings=HeadsTrainSettings(steps=120, batch=64, eval_every=120, eval_positions=512,
                                    vocab="seen"),
        threads=1, progress=False, log=None)
    top1 = result.curve[-1]["top1"]
    assert top1[0] > 0.15 and top1[1] > 0.05  # chance is 1 / 49,152
    assert read_heads(tmp_path / "heads").num_heads == 2


def test_an_interrupted_write_leaves_the_old_heads(dataset: Any, tmp_path: Path,
                                                   monkeypatch: Any) -> None:
    """The heads folder is built beside its place and swapped in complete: an interrupt (here
    while drawing the curve) leaves the heads that were there, and no temporary."""
    import blockdraft.training.heads.recipe as recipe

    lm_head = lm_head_weight(tiny_llama(init=0.1))
    result = train_heads(dataset, lm_head, tmp_path / "w", TRAIN, log=None, progress=False)
    folder = write_trained_heads(result, tmp_path / "out" / "heads", "tiny", "# old\n")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(recipe, "plot_curve", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_trained_heads(result, folder, "tiny", "# new\n")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["heads"]


def test_the_heads_to_start_from_are_read_and_named_by_digest(tmp_path: Path) -> None:
    """``--init``: a heads folder (Medusa or prefix) read back with a ``name@digest`` label
    that changes with the weights; a folder without heads is refused by name."""
    from blockdraft.models.hf.prefix_heads import PrefixHeads, write_prefix_heads
    from blockdraft.training import TrainingError
    from blockdraft.training.heads.recipe import _init_heads

    torch.manual_seed(0)
    medusa = write_heads(MedusaHeads(32, None, 2), tmp_path / "m")
    prefix = write_prefix_heads(PrefixHeads(32, 2), tmp_path / "p")
    heads, label = _init_heads(medusa)
    assert isinstance(heads, MedusaHeads) and label.startswith("m@") and len(label) == 14
    other, other_label = _init_heads(prefix)
    assert isinstance(other, PrefixHeads) and other_label.startswith("p@")
    torch.manual_seed(1)
    again = write_heads(MedusaHeads(32, None, 2), tmp_path / "m2")
    assert _init_heads(again)[1].split("@")[1] != label.split("@")[1]
    assert _init_heads(None) == (None, "")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainingError, match="the heads to start from"):
        _init_heads(tmp_path / "empty")
