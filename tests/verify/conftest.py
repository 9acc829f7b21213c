"""Fixtures of the verify room: random tiny blockwise LMs, a bigram "chain" model, an oracle
drafter, and a tiny n-gram LM over the test vocabulary."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from blockdraft.drafts import DraftBatch, DraftTree, Feedback, Needs, StepView
from blockdraft.lattice import SausageLattice
from blockdraft.models import BlockwiseConfig, BlockwiseLM

LM_VOCAB = 50  # the n-gram LM knows ids 0..49; every test model has V >= 50


def _random_model(
    seed: int = 0,
    vocab: int = 64,
    h: int = 4,
    scale: float = 10.0,
    head_scale: float = 0.5,
    max_seq_len: int = 128,
) -> BlockwiseLM:
    """A random tiny BlockwiseLM. ``scale`` multiplies the body's matrices (1: the flat GPT-2
    init, whose greedy output loops on one token; 10-30: peaky, varied output);
    ``head_scale`` sets the extra heads' FFN weights (0: every head copies head 1)."""
    torch.manual_seed(seed)
    model = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=vocab, h=h, max_seq_len=max_seq_len))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2 and not name.startswith("extra_heads"):
                param.mul_(scale)
        for param in model.head_parameters():
            param.copy_(torch.randn(param.shape, generator=g) * head_scale / param.shape[-1] ** 0.5)
    return model.eval()


@pytest.fixture(scope="session")
def random_model() -> Callable[..., BlockwiseLM]:
    """``random_model(seed=0, vocab=64, h=4, scale=10.0, head_scale=0.5, max_seq_len=128)``."""
    return _random_model


def _chain_model(vocab: int = 64, h: int = 4, seed: int = 0) -> tuple[BlockwiseLM, np.ndarray]:
    """A bigram model whose greedy output walks one cycle through the vocabulary.

    The blocks' residual branches are zeroed, so the final state is the embedding of the
    current token; the (untied) head maps token ``order[i]`` to ``order[i + 1]``. The extra
    heads copy head 1, so vanilla BPD drafts are wrong after slot 1 (B = 1) while copying the
    chain from a prompt that holds it is right. Returns ``(model, order)``.
    """
    torch.manual_seed(seed)
    config = BlockwiseConfig.tiny(vocab_size=vocab, h=h, max_seq_len=128, tie_embeddings=False)
    model = BlockwiseLM(config)
    order = np.random.default_rng(seed).permutation(vocab)
    with torch.no_grad():
        for block in model.transformer.blocks:
            block.attn.proj.weight.zero_()
            block.mlp.proj.weight.zero_()
        emb = model.transformer.wte.weight
        emb.normal_()
        normed = F.layer_norm(emb, (config.d_model,))  # what ln_f makes of each embedding
        assert model.lm_head is not None
        nxt = torch.as_tensor(np.roll(order, -1))
        model.lm_head.weight[nxt] = normed[torch.as_tensor(order)]
    return model.eval(), order


@pytest.fixture(scope="session")
def chain_model() -> Callable[..., tuple[BlockwiseLM, np.ndarray]]:
    """``chain_model(vocab=64, h=4, seed=0) -> (model, order)``: see :func:`_chain_model`."""
    return _chain_model


@dataclass(frozen=True, eq=False)
class OracleDrafter:
    """Drafts from the known greedy output ``truth``: row 0 is a copy of the truth with one
    token (at a random slot >= 2) replaced, the other rows truth prefixes continued at
    random, so every accepted length turns up; verified as their trie. For tests only."""

    prompt_length: int
    truth: Sequence[int]
    p: int = 3
    seed: int = 0
    vocab: int = 50
    k: int = 1
    name: str = "oracle"

    @property
    def needs(self) -> Needs:
        return Needs(k=self.k)

    def rows(self, lattice: SausageLattice, context: Sequence[int]) -> DraftBatch:
        """The step's drafts (see the class docstring)."""
        t = len(context) - self.prompt_length  # index of d_1 in the output
        h = lattice.h
        rng = np.random.default_rng(self.seed + 1000 * t)
        truth = list(self.truth[t : t + h])
        truth += lattice.vanilla()[len(truth):].tolist()  # past the reference's end
        rows = []
        for _ in range(self.p):
            row = list(truth)
            cut = int(rng.integers(1, h + 1))  # keep d_1 .. d_cut
            for i in range(cut, h):
                row[i] = int(rng.integers(0, self.vocab))
            rows.append(row)
        tokens = np.array(rows, dtype=np.int64)
        tokens[:, 0] = lattice.tokens[0, 0]
        zeros = np.zeros(self.p)
        return DraftBatch(tokens=tokens, scores=-np.arange(self.p, dtype=float),
                          head_scores=zeros, lm_scores=zeros, source="oracle")

    def draft(self, view: StepView) -> DraftTree:
        return DraftTree.from_drafts(self.rows(view.lattice, view.context.tolist()))

    def observe(self, feedback: Feedback) -> None:
        pass


@pytest.fixture(scope="session")
def oracle_drafter() -> type[OracleDrafter]:
    return OracleDrafter


@pytest.fixture(scope="session")
def tiny_ngram(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-gram ARPA file over ids 0..49, from a random sparse Markov chain (skips without
    KenLM's lmplz)."""
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.training.ngram import find_kenlm_tool, train_ngram

    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e}); run `make setup`")
    rng = np.random.default_rng(0)
    successors = rng.integers(0, LM_VOCAB, size=(LM_VOCAB, 3))
    seqs = []
    for _ in range(300):
        seq = [int(rng.integers(0, LM_VOCAB))]
        for _ in range(20):
            seq.append(int(successors[seq[-1], rng.integers(0, 3)]))
        seqs.append(seq)
    seqs.append(list(range(LM_VOCAB)))  # every id is a word of the LM
    out = tmp_path_factory.mktemp("verify_lm") / "chain3"
    return train_ngram(seqs, out, order=3, memory="64M").arpa
