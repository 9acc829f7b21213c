"""HFCache: immutable (a forward never writes the tensors a caller holds), views where the
protocol promises views, and crop / select / expand / gather continue exactly."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from blockdraft.models.errors import ModelError
from blockdraft.models.hf import HFCache


def prefill(model: Any, ids: torch.Tensor) -> tuple[torch.Tensor, HFCache]:
    with torch.no_grad():
        return model.heads_logits(ids)  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_a_forward_never_changes_a_cache_the_caller_holds(hf_model: Any, kind: str) -> None:
    model = hf_model(kind)
    _, past = prefill(model, torch.tensor([[5, 6, 7, 8, 9]]))
    snapshot = [t.clone() for t in past.keys + past.values]
    pointers = [t.data_ptr() for t in past.keys + past.values]
    for view in (past, past.expand(3), past.crop(3), past.select_row(0)):
        with torch.no_grad():
            _, new = model.heads_logits(torch.ones(view.batch_size, 2, dtype=torch.long), view)
        assert new.length == view.length + 2
    assert past.length == 5 and past.batch_size == 1
    assert [t.data_ptr() for t in past.keys + past.values] == pointers
    assert all(torch.equal(a, b) for a, b in zip(past.keys + past.values, snapshot, strict=True))


def test_dynamic_wraps_the_tensors_without_copying(hf_model: Any) -> None:
    _, past = prefill(hf_model("llama"), torch.tensor([[5, 6, 7]]))
    dynamic = past.dynamic()
    assert dynamic.get_seq_length() == 3
    assert all(layer.keys is k and layer.values is v
               for layer, k, v in zip(dynamic.layers, past.keys, past.values, strict=True))
    back = HFCache.from_dynamic(dynamic)
    assert all(a is b for a, b in zip(back.keys, past.keys, strict=True))


def test_views_and_selections(hf_model: Any) -> None:
    _, past = prefill(hf_model("llama"), torch.randint(2, 200, (3, 6)))
    key = past.keys[0]  # (3, n_kv, 6, hs)
    crop = past.crop(4)
    assert crop.length == 4 and crop.keys[0].data_ptr() == key.data_ptr()  # a view
    assert torch.equal(crop.keys[0], key[:, :, :4]) and past.crop(6) is past
    row = past.select_row(2)
    assert row.batch_size == 1 and torch.equal(row.values[1], past.values[1][2:3])
    wide = row.expand(5)
    assert wide.batch_size == 5 and wide.keys[0].stride(0) == 0  # no copy
    assert row.expand(1) is row
    rows = past.select_rows([2, 0, 2])
    assert torch.equal(rows.keys[1], past.keys[1][[2, 0, 2]])
    gathered = past.gather([0, 1, 4])
    assert gathered.length == 3 and torch.equal(gathered.keys[0], key[:, :, [0, 1, 4]])
    assert torch.equal(gathered.values[1], past.values[1][:, :, [0, 1, 4]])
    assert repr(gathered) == "HFCache(n_layer=2, batch_size=3, length=3)"


def test_crop_and_gather_continue_like_a_fresh_pass(hf_model: Any) -> None:
    """The verifier's winner selection: a row of a batch, cropped, then the next tokens."""
    model = hf_model("gpt2")
    ids = torch.randint(2, 200, (1, 10), generator=torch.Generator().manual_seed(7))
    tail = torch.tensor([[11, 12, 13]])
    full, _ = prefill(model, torch.cat((ids[:, :6], tail), dim=1))
    _, past = prefill(model, ids.expand(2, -1))
    with torch.no_grad():
        cropped, _ = model.heads_logits(tail, past.select_row(1).crop(6))
        gathered, _ = model.heads_logits(tail, past.select_row(0).gather(list(range(6))))
    torch.testing.assert_close(cropped[0], full[0, 6:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gathered[0], full[0, 6:], rtol=1e-5, atol=1e-5)


def test_gather_keeps_a_branch_at_contiguous_positions(hf_model: Any) -> None:
    """A token tree's accepted path: prefix (4) + two one-token branches fed side by side at
    position 4 (rows of a batch); keeping branch B's row is a gather's simplest case, and a
    gather of non-contiguous positions keeps exactly those keys."""
    model = hf_model("llama")
    prefix = torch.tensor([[3, 9, 27, 81]])
    _, past = prefill(model, prefix)
    with torch.no_grad():
        _, both = model.heads_logits(torch.tensor([[50], [60]]), past)
        next_logits, _ = model.heads_logits(torch.tensor([[7]]), both.select_row(1))
        reference, _ = model.heads_logits(torch.tensor([[3, 9, 27, 81, 60, 7]]))
    torch.testing.assert_close(next_logits[0, 0], reference[0, -1], rtol=1e-5, atol=1e-5)
    kept = both.gather(torch.tensor([0, 1, 2, 3, 4]))
    assert all(torch.equal(a, b) for a, b in zip(kept.keys, both.keys, strict=True))


def test_invalid_operations_are_refused(hf_model: Any) -> None:
    _, past = prefill(hf_model("llama"), torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ModelError, match=r"crop length must be an integer in \[1, 4\]"):
        past.crop(0)
    with pytest.raises(ModelError, match=r"crop length"):
        past.crop(5)
    with pytest.raises(ModelError, match=r"row must be an integer in \[0, 2\)"):
        past.select_row(2)
    with pytest.raises(ModelError, match="only a batch-1 cache can be expanded"):
        past.expand(3)
    with pytest.raises(ModelError, match=r"positions must lie in \[0, 4\)"):
        past.gather([0, 4])
    with pytest.raises(ModelError, match="non-empty 1-D"):
        past.gather([])
    with pytest.raises(ModelError, match=r"rows must lie in \[0, 2\)"):
        past.select_rows([0, 2])
    with pytest.raises(ModelError, match="every layer must be"):
        HFCache(keys=(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 5, 4)),
                values=(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 5, 4)))
    with pytest.raises(ModelError, match="one key and one value tensor per layer"):
        HFCache(keys=(), values=())
