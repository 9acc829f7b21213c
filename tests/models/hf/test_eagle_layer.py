"""The EAGLE draft layer (models/heads/eagle_layer, eagle_files): its KV cache equals a
recompute, its training-time-test unrolling equals step-by-step chain drafting, its folder
round-trips, and what does not fit is refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from blockdraft.models import ModelError  # noqa: E402
from blockdraft.models.heads.eagle_files import (  # noqa: E402
    WEIGHTS_FILE,
    is_eagle_folder,
    read_eagle,
    write_eagle,
)
from blockdraft.models.heads.eagle_layer import (  # noqa: E402
    EagleConfig,
    EagleLayer,
    truncate_kv,
)
from hf_testlib import V, randomize, tiny_hf_base  # noqa: E402

D = 64


def layer(fusion: str = "top", seed: int = 0, shortlist: Any = None) -> EagleLayer:
    """A draft layer for the tiny Llama, its weights random enough to guess something."""
    base = tiny_hf_base("llama")
    config = EagleConfig.from_base(base.config, fusion)
    torch.manual_seed(seed)
    out = EagleLayer(config, shortlist)
    randomize(out, seed, 0.15)
    return out.attach(base.get_input_embeddings().weight, base.get_output_embeddings().weight)


def inputs(width: int, b: int = 2, t: int = 12, seed: int = 3
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(b, t, width, generator=g)
    tokens = torch.randint(0, V, (b, t), generator=g)
    positions = torch.arange(t).repeat(b, 1) + torch.tensor([[0], [5]])[:b]
    return features, tokens, positions


@pytest.mark.parametrize("fusion", ["top", "layers"])
def test_the_cached_forward_equals_a_recompute(fusion: str) -> None:
    net = layer(fusion).eval()
    features, tokens, positions = inputs(net.config.feature_width)
    with torch.no_grad():
        whole = net(features, tokens, positions)
        kv = None
        logits, outs = [], []
        for a, b in ((0, 5), (5, 6), (6, 12)):  # a prefill, one position, then several
            step = net(features[:, a:b], tokens[:, a:b], positions[:, a:b], kv)
            kv = step.kv
            logits.append(step.logits)
            outs.append(step.features)
    assert kv is not None and kv[0].shape == (2, net.config.num_kv_heads, 12,
                                               net.config.head_dim)
    torch.testing.assert_close(torch.cat(logits, 1), whole.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.cat(outs, 1), whole.features, rtol=1e-5, atol=1e-5)
    assert whole.logits.shape == (2, 12, V)
    # an explicit mask equal to the causal one changes nothing; another one does
    causal = torch.ones(12, 12).tril().bool()[None]
    with torch.no_grad():
        same = net(features, tokens, positions, mask=causal)
        other = net(features, tokens, positions, mask=torch.eye(12).bool()[None])
    torch.testing.assert_close(same.logits, whole.logits)
    assert not torch.allclose(other.logits[:, 1:], whole.logits[:, 1:])


@pytest.mark.parametrize("fusion", ["top", "layers"])
def test_unrolling_equals_step_by_step_chain_drafting(fusion: str) -> None:
    net = layer(fusion, shortlist=torch.arange(10, 70)).eval()
    features, tokens, positions = inputs(net.config.feature_width, t=10)
    steps = 4
    with torch.no_grad():
        unrolled = net.unroll(features, tokens, positions, steps)
        for root in (0, 3, 5):  # a chain from each root, teacher-forced with the true tokens
            chain = net.draft_chain(features[:, :root + 1], tokens[:, :root + 1],
                                    positions[:, :root + 1], steps,
                                    forced=tokens[:, root + 1:root + steps])
            for k in range(steps):
                torch.testing.assert_close(chain.logits[:, k], unrolled[k].logits[:, root + k],
                                           rtol=1e-4, atol=1e-5)
                best = net.token_ids(unrolled[k].logits[:, root + k].argmax(-1))
                assert chain.tokens[:, k].tolist() == best.tolist()
    assert chain.kv[0].shape[2] == 6 + steps - 1
    assert truncate_kv(chain.kv, 6)[0].shape[2] == 6
    # the drafts are base ids inside the shortlist
    assert bool(((chain.tokens >= 10) & (chain.tokens < 70)).all())


def test_a_greedy_chain_feeds_its_own_drafts() -> None:
    net = layer("top").eval()
    features, tokens, positions = inputs(D, b=1, t=6)
    with torch.no_grad():
        chain = net.draft_chain(features, tokens, positions, 3)
        forced = net.draft_chain(features, tokens, positions, 3, forced=chain.tokens[:, :2])
    torch.testing.assert_close(chain.logits, forced.logits)


def test_unrolled_steps_carry_gradients_to_the_layer_only() -> None:
    net = layer("layers")
    features, tokens, positions = inputs(net.config.feature_width, t=6)
    out = net.unroll(features, tokens, positions, 3)
    sum(s.logits.logsumexp(-1).sum() for s in out).backward()
    assert net.fuse_proj.weight.grad is not None and net.q_proj.weight.grad is not None
    assert net.embed is not None and not net.embed.requires_grad
    assert "embed" not in net.state_dict() and "head" not in net.state_dict()


@pytest.mark.parametrize("fusion", ["top", "layers"])
def test_the_folder_round_trips(tmp_path: Path, fusion: str) -> None:
    net = layer(fusion, shortlist=torch.tensor([50, 3, 7, 20]))
    net.shortlist_info = {"counted_on": "tests"}
    base = tiny_hf_base("llama")
    folder = write_eagle(net, tmp_path / "e", base_model="tiny", record={"features": "forward"})
    assert is_eagle_folder(folder) and not is_eagle_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    assert config["kind"] == "eagle" and config["training"] == {"features": "forward"}
    back = read_eagle(folder, base.get_input_embeddings().weight,
                      base.get_output_embeddings().weight)
    assert back.config == net.config and back.shortlist.tolist() == [3, 7, 20, 50]
    assert back.shortlist_info["counted_on"] == "tests"
    features, tokens, positions = inputs(net.config.feature_width)
    with torch.no_grad():
        torch.testing.assert_close(back(features, tokens, positions).logits,
                                   net.eval()(features, tokens, positions).logits)
    raw = bytearray((folder / WEIGHTS_FILE).read_bytes())
    raw[-3] ^= 0xFF  # one weight's bits
    (folder / WEIGHTS_FILE).write_bytes(bytes(raw))
    with pytest.raises(ModelError, match="damaged"):
        read_eagle(folder)


def test_what_does_not_fit_is_refused_by_name() -> None:
    net = layer("layers")
    features, tokens, positions = inputs(D + 1)
    with pytest.raises(ModelError, match="width 65.*width 192"):
        net(features, tokens, positions)
    with pytest.raises(ModelError, match=r"token ids must lie in \[0, 96\)"):
        net(*inputs(D)[:1], torch.full((2, 12), V), positions)
    with pytest.raises(ModelError, match=r"shape \(96, 32\).*\[96, 64\]"):
        net.attach(torch.zeros(V, 32), torch.zeros(V, 32))
    with pytest.raises(ModelError, match="no base embedding"):
        EagleLayer(net.config)(*inputs(192))
    gpt2 = tiny_hf_base("gpt2").config
    with pytest.raises(ModelError, match="activation is 'gelu_new'"):
        EagleConfig.from_base(gpt2)
    qwen = tiny_hf_base("qwen2").config
    qwen.attention_bias = True
    with pytest.raises(ModelError, match="attention_bias=True"):
        EagleConfig.from_base(qwen)
    llama = tiny_hf_base("llama").config
    llama.rope_parameters = {"rope_type": "llama3", "rope_theta": 1e4}
    with pytest.raises(ModelError, match="'llama3'"):
        EagleConfig.from_base(llama)
    with pytest.raises(ModelError, match=r"fuse_layers .*\[1, 2\].*\(0, 5\)"):
        EagleConfig.from_base(tiny_hf_base("llama").config, "layers", (0, 5))
    with pytest.raises(ModelError, match="distinct ids"):
        EagleLayer(net.config, torch.tensor([1, 1, 2]))
