"""record_trace on a real (tiny, random) model, and online decode == offline simulation for
an n-gram-rescored drafter over that trace."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blockdraft.drafts import HeadDrafter
from blockdraft.models import BlockwiseConfig, BlockwiseLM, greedy_generate
from blockdraft.oracle import OracleError, simulate
from blockdraft.oracle.record import record_trace
from blockdraft.rescorers.ngram import NgramLM, NgramRescorer
from blockdraft.training.ngram import train_ngram
from blockdraft.verify import decode

V = 48


@pytest.fixture(scope="module")
def model() -> BlockwiseLM:
    torch.manual_seed(0)
    m = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=V, h=4, max_seq_len=96))
    with torch.no_grad():  # sharper heads than the default init: more varied drafts
        for prm in m.parameters():
            prm.mul_(4.0)
    return m.eval()


PROMPTS = [[1, 2, 3], [7, 7, 8, 9, 10], [30]]


def test_trace_holds_the_greedy_output_and_head_logits(model, tmp_path):
    trace = record_trace(model, PROMPTS, tmp_path / "t", max_new_tokens=20, K=8,
                         signature={"model": "tiny-random"})
    assert len(trace) == 3 and trace.h == 4 and trace.V == V and trace.K == 8
    for ex, prompt in zip(trace, PROMPTS, strict=True):
        y = greedy_generate(model, prompt, 20)
        assert ex.prompt_ids.tolist() == prompt and ex.greedy_ids.tolist() == y
        # Head 1's top-1 at t is y_{t+1} (no ties in random float weights).
        assert ex.topk_ids[:, 0, 0].tolist() == y
    assert trace.signature["model"] == "tiny-random"


def test_online_decode_equals_offline_simulation_with_ngram_rescoring(model, tmp_path):
    seqs = [greedy_generate(model, [i], 40) for i in range(V)]
    lm = NgramLM(train_ngram(seqs + [list(range(V))], tmp_path / "lm", order=3).arpa)
    trace = record_trace(model, PROMPTS, tmp_path / "t", max_new_tokens=30, K=8)
    for p in (1, 3):
        drafter = HeadDrafter(k=8, p=p, rescorer=NgramRescorer(lm, alpha=0.5))
        offline = simulate(trace, drafter)
        for j, prompt in enumerate(PROMPTS):
            online = decode(model, prompt, drafter=drafter, max_new_tokens=30)
            mine = offline.steps.example == j
            assert online.tokens == trace[j].greedy_ids.tolist()
            assert online.accept_lengths == offline.steps.n[mine].tolist()
            assert [s.winner for s in online.steps] == offline.steps.winner[mine].tolist()


def test_record_trace_rejects_bad_prompts(model, tmp_path):
    with pytest.raises(OracleError, match="prompt 1 is empty"):
        record_trace(model, [[1], []], tmp_path / "t", max_new_tokens=4)
    with pytest.raises(OracleError, match="no prompts"):
        record_trace(model, [], tmp_path / "t", max_new_tokens=4)
    with pytest.raises(Exception, match="context|max_seq_len"):
        record_trace(model, [list(np.arange(90) % V)], tmp_path / "t", max_new_tokens=30)
