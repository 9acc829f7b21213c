"""One step record and one heads object per kind, on every runtime (issue 38, must-have 5).

- A token tree's step on PyTorch, ONNX Runtime and the static cache gives the same hidden
  states (each runtime turns the same checked record into its own attention input).
- The heads of each kind (Medusa, prefix-conditioned) give the same states, projections, top-k
  and tree-lattice expansions on every runtime, the rule written once over each runtime's
  backend; every kind has a rule, a PyTorch backend, ONNX graphs and an ONNX Runtime backend.
- The runtimes that wrap a loaded model share its attributes through one record, and define
  none of them one by one; their sessions have the options every blockdraft session has.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from hf_testlib import V, randomize, tiny_hf_base
from models_testlib import ancestors

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from blockdraft.models import ModelError  # noqa: E402
from blockdraft.models.heads import RULES, TORCH_BACKENDS, MedusaRule, PrefixRule  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402
from blockdraft.models.hf.prefix_heads import PrefixHeads  # noqa: E402
from blockdraft.models.runtimes import (  # noqa: E402
    REFUSED_HEADS,
    TORCH_ONLY_HEADS,
    on_runtime,
)
from blockdraft.models.runtimes.onnx_head_graphs import HEAD_GRAPHS  # noqa: E402
from blockdraft.models.runtimes.onnx_heads import ORT_BACKENDS  # noqa: E402
from blockdraft.models.runtimes.onnx_model import OrtBlockwiseModel  # noqa: E402
from blockdraft.models.runtimes.static import StaticKVModel  # noqa: E402
from blockdraft.models.runtimes.wrapped import RuntimeModel, Shared  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_grad", "private_cache")

TOL = {"atol": 1e-4, "rtol": 1e-4}


def tiny(heads: str, family: str = "llama", seed: int = 0) -> HFBlockwiseModel:
    """A tiny random model with 3 random heads of a kind, over a 40-token shortlist (``own``:
    Medusa heads with their own projections, no shortlist)."""
    if heads == "prefix":
        module: Any = randomize(PrefixHeads(64, 3, 1), seed + 1, scale=0.3)
    elif heads == "own":
        module = randomize(MedusaHeads(64, V, 3, 1, own_projection=True), seed + 1)
    else:
        module = randomize(MedusaHeads(64, None, 3, 1), seed + 1)
    if heads != "own":
        g = torch.Generator().manual_seed(seed + 2)
        module.set_shortlist(torch.randperm(V, generator=g)[:40], vocab_size=V)
    return HFBlockwiseModel(tiny_hf_base(family, seed, init=0.3), module)


_RUNTIMES: dict[tuple[str, str], tuple[Any, ...]] = {}


def runtimes(heads: str, family: str = "llama") -> tuple[Any, ...]:
    """The model on PyTorch, ONNX Runtime and the static cache (kept for the session)."""
    if (heads, family) not in _RUNTIMES:
        model = tiny(heads, family)
        _RUNTIMES[(heads, family)] = (model, on_runtime(model, "onnxruntime", "float32"),
                                      StaticKVModel(model, capacity=64))
    return _RUNTIMES[(heads, family)]




@pytest.mark.parametrize("family", ["llama", "mistral", "gpt2"])
def test_a_tree_step_gives_the_same_hidden_states_on_every_runtime(family: str) -> None:
    """The same record (ids, positions, ancestor mask, rows written), three attention inputs:
    transformers' 4D mask, ONNX Runtime's bias over the buffer's rows, the static cache's bias
    over all its rows (mistral: a sliding window of 8, which the tree reaches past)."""
    runs = runtimes("medusa", family)
    parents = [-1, 0, 0, 1, 1, 2, 3, 6, 7]
    mask, depths = ancestors(parents)
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(2, V, (1, 6), generator=g)
    tokens = torch.randint(2, V, (1, len(parents)), generator=g)
    kw = {"position_ids": torch.tensor(6 + depths), "tree_mask": torch.tensor(mask)}
    got = []
    for m in runs:
        _, past = m.hidden(prompt)
        x, cache = m.hidden(tokens, past, **kw)
        assert cache.length == 6 + len(parents)
        got.append(x)
    for x in got[1:]:
        torch.testing.assert_close(x, got[0], **TOL)
    # and each node what its root-to-node path gives it as a plain chain
    _, past = runs[0].hidden(prompt)
    for u in (4, 8):
        chain, _ = runs[0].hidden(tokens[:, np.flatnonzero(mask[u])], past)
        torch.testing.assert_close(got[0][0, u], chain[0, -1], **TOL)


@pytest.mark.parametrize("heads", ["medusa", "own", "prefix"])
def test_each_kind_of_heads_gives_the_same_numbers_on_every_runtime(heads: str) -> None:
    model, ort, static = runtimes(heads)
    rule = {"prefix": PrefixRule}.get(heads, MedusaRule)
    for m in (model, ort, static):
        assert type(m.heads_rule) is rule
        assert m.conditional_heads == (heads == "prefix")
        assert m.capabilities.heads == rule.kind
    assert static.heads_rule is model.heads_rule  # the modules, on the model's device
    x, _ = model.hidden(torch.randint(2, V, (1, 7), generator=torch.Generator().manual_seed(3)))
    x = x[0]  # (7, d)
    first = model.lm_head(x).argmax(-1)
    want_states = model.head_states(x)
    want_logits = model.project(want_states)
    for m in (ort, static):
        torch.testing.assert_close(m.head_states(x), want_states, **TOL)
        torch.testing.assert_close(m.project(m.head_states(x)), want_logits, **TOL)
        for k in (1, 5, 50):  # 50: wider than the shortlist, padded
            for given in (None, first):
                want = model.head_topk(x, k, first=given)
                got = m.head_topk(x, k, first=given)
                assert got[0].shape == want[0].shape == (7, 3, k)
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_allclose(got[1], want[1], **TOL)
            np.testing.assert_array_equal(m.head_topk(x, 4, heads=2)[0],
                                          model.head_topk(x, 4, heads=2)[0])
    rng = np.random.default_rng(0)
    for t in range(3):
        state = x[t]
        certain = int(first[t])
        expanders = [m.expander(state, 4, certain) for m in (model, ort, static)]
        if heads != "prefix":
            assert expanders == [None, None, None]  # a sausage lattice
            continue
        prefixes = [(), (certain,), (certain, 7), (certain, *rng.integers(0, V, 2).tolist())]
        for prefix in prefixes:
            want_ids, want_sc = expanders[0](prefix)
            for expand in expanders[1:]:
                got_ids, got_sc = expand(prefix)
                np.testing.assert_array_equal(got_ids, want_ids)
                np.testing.assert_allclose(got_sc, want_sc, **TOL)


def test_every_kind_has_a_rule_and_a_backend_on_every_runtime() -> None:
    """Every kind has a rule, a PyTorch backend, ONNX graphs and an ONNX Runtime backend (none
    is PyTorch-only now), and no runtime refuses a kind (the static runtime runs the EAGLE draft
    layer's PyTorch backend: tests/models/runtimes/test_static_eagle.py)."""
    assert set(RULES) == set(TORCH_BACKENDS)
    assert set(ORT_BACKENDS) == set(HEAD_GRAPHS) == set(RULES) - set(TORCH_ONLY_HEADS)
    assert TORCH_ONLY_HEADS == ()
    assert REFUSED_HEADS == {}
    assert {rule.kind for rule in RULES.values()} == set(RULES)
    assert MedusaHeads.kind == "medusa" and PrefixHeads.kind == "prefix"


def test_a_kind_a_runtime_does_not_take_is_refused_by_name(monkeypatch: Any) -> None:
    """The table stays (no runtime refuses a kind now): an entry refuses that kind on that
    runtime by name, saying which runtimes take it."""
    monkeypatch.setitem(REFUSED_HEADS, "static", ("prefix",))
    with pytest.raises(ModelError, match="kind 'prefix' do not run on runtime 'static' yet: "
                                         "load the model with runtime='torch' or "
                                         "'onnxruntime'"):
        on_runtime(runtimes("prefix")[0], "static", "float32")


def test_the_wrapped_model_is_shared_through_one_record() -> None:
    model, ort, static = runtimes("prefix")
    for m in (ort, static):
        assert isinstance(m, RuntimeModel) and isinstance(m.shared, Shared)
        assert (m.tokenizer, m.heads_digest, m.h, m.max_seq_len) == (
            model.tokenizer, model.heads_digest, model.h, model.max_seq_len)
        assert m.config.vocab_size == model.config.vocab_size
        assert m.capabilities.heads == model.capabilities.heads == "prefix"
        assert m.drafting is model.heads.drafting
        assert m.training is False and m.eval() is m
    assert ort.precision == ort.config.dtype == "float32" and ort.capabilities.device == "cpu"
    assert static.capabilities == model.capabilities.with_(runtime="static")
    shared = ("config", "tokenizer", "h", "max_seq_len", "drafting", "heads_digest",
              "capabilities", "precision", "conditional_heads", "head_states", "project",
              "head_topk", "expander")
    for cls in (OrtBlockwiseModel, StaticKVModel):  # none forwarded by hand
        assert not [name for name in shared if name in vars(cls)], cls


def test_the_sessions_have_the_options_of_every_blockdraft_session() -> None:
    """The base model's sessions open through the one session module the rescoring LM's use
    (tests/rescorers/test_neural_export.py checks those)."""
    import onnxruntime as ort

    _, runtime, _ = runtimes("prefix")
    for session in (runtime._body, runtime.heads_rule.backend._drafts):
        options = session.get_session_options()
        assert options.inter_op_num_threads == 1 and options.log_severity_level == 3
        assert options.intra_op_num_threads == runtime.threads
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
        assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
