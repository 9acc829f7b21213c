"""KVCache: the generic operations (gather, select_rows, to) on the reference model's cache,
their errors, and that every operation keeps a subclass's type."""

from __future__ import annotations

import pytest
import torch

from blockdraft.models import KVCache, ModelError
from models_testlib import VOCAB, tiny_model

ATOL = 1e-5


def cache(b: int = 2, t: int = 5, layers: int = 2) -> KVCache:
    g = torch.Generator().manual_seed(3)
    return KVCache(keys=tuple(torch.randn(b, 2, t, 4, generator=g) for _ in range(layers)),
                   values=tuple(torch.randn(b, 2, t, 4, generator=g) for _ in range(layers)))


def test_gather_and_select_rows_index_every_layer() -> None:
    past = cache(b=3, t=6)
    gathered = past.gather([0, 1, 4])
    assert gathered.length == 3 and gathered.batch_size == 3
    for i in range(past.n_layer):
        assert torch.equal(gathered.keys[i], past.keys[i][:, :, [0, 1, 4]])
        assert torch.equal(gathered.values[i], past.values[i][:, :, [0, 1, 4]])
    assert torch.equal(past.gather(torch.tensor([2, 0])).keys[1], past.keys[1][:, :, [2, 0]])
    rows = past.select_rows([2, 0, 2])
    assert rows.batch_size == 3 and rows.length == 6
    assert torch.equal(rows.keys[0], past.keys[0][[2, 0, 2]])
    assert torch.equal(rows.values[1], past.values[1][[2, 0, 2]])
    moved = past.to("cpu")
    assert moved.device == torch.device("cpu") and torch.equal(moved.keys[0], past.keys[0])
    assert repr(gathered) == "KVCache(n_layer=2, batch_size=3, length=3)"


@torch.no_grad()
def test_gather_keeps_a_branch_at_contiguous_positions() -> None:
    """A token tree's accepted path: two one-token branches fed side by side at position 4
    (rows of a batch); keeping the prefix and branch B continues like a fresh pass."""
    model = tiny_model()
    prefix = torch.tensor([[3, 9, 27, VOCAB - 1]])
    _, past = model.heads_logits(prefix)
    _, both = model.heads_logits(torch.tensor([[5], [6]]), past)
    kept = both.select_row(1).gather(list(range(5)))
    assert all(torch.equal(a, b) for a, b in zip(kept.keys, both.select_row(1).keys,
                                                  strict=True))
    nxt, _ = model.heads_logits(torch.tensor([[7]]), kept)
    full, _ = model.heads_logits(torch.cat((prefix, torch.tensor([[6, 7]])), dim=1))
    torch.testing.assert_close(nxt[0, 0], full[0, -1], atol=ATOL, rtol=0)
    # a gather of the prefix alone is a crop, continued exactly
    cont, _ = model.heads_logits(torch.tensor([[6]]), both.select_row(0).gather([0, 1, 2, 3]))
    torch.testing.assert_close(cont[0, 0], full[0, 4], atol=ATOL, rtol=0)


def test_gather_and_select_rows_errors() -> None:
    past = cache(b=2, t=4)
    with pytest.raises(ModelError, match=r"positions must lie in \[0, 4\)"):
        past.gather([0, 4])
    with pytest.raises(ModelError, match="non-empty 1-D"):
        past.gather([])
    with pytest.raises(ModelError, match="non-empty 1-D"):
        past.gather([[0, 1]])
    with pytest.raises(ModelError, match=r"rows must lie in \[0, 2\)"):
        past.select_rows([0, 2])
    with pytest.raises(ModelError, match="at least one row"):
        past.select_rows([])
    with pytest.raises(ModelError, match=r"row must be an integer in \[0, 2\)"):
        past.select_row(2)
    with pytest.raises(ModelError, match="one key and one value tensor per layer"):
        KVCache(keys=(), values=())
    with pytest.raises(ModelError, match="every layer must be"):
        KVCache(keys=(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5)),
                values=(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5)))


class TaggedCache(KVCache):
    """A subclass, as models/hf's HFCache is."""


def test_every_operation_keeps_the_subclass() -> None:
    base = cache(b=1, t=5)
    tagged = TaggedCache(keys=base.keys, values=base.values)
    results = [tagged.crop(3), tagged.select_row(0), tagged.select_rows([0, 0]),
               tagged.expand(4), tagged.gather([1, 3]), tagged.to("cpu")]
    assert all(type(r) is TaggedCache for r in results)
    assert repr(tagged) == "TaggedCache(n_layer=2, batch_size=1, length=5)"
