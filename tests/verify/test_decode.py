"""The decode loop: lossless against greedy decoding (hypothesis), block-efficiency counting,
EOS and length handling, several prompts, IAD, bad input, CUDA = CPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockdraft.drafts import DraftTree, Feedback, HeadDrafter, Needs, StepView
from blockdraft.drafts.iad import CombinedDrafter, InputCopyDrafter
from blockdraft.models import BlockwiseLM, greedy_generate
from blockdraft.verify import DecodeResult, VerifyError, decode


def check_counting(result: DecodeResult, h: int, max_new: int, eos: int | None) -> None:
    """B and the step records follow SPEC sec. 2's counting rule."""
    tokens = result.tokens
    assert result.calls == 1 + len(result.steps)
    deepest = max([h] + [s.tree.max_depth + 1 for s in result.steps if s.tree is not None])
    assert 1.0 <= result.block_efficiency <= deepest  # a copy may run deeper than h
    assert result.block_efficiency == pytest.approx(len(tokens) / result.calls)
    assert len(tokens) == 1 + sum(len(s.tokens) for s in result.steps)
    for step in result.steps:
        start = step.position + 1
        assert tokens[start : start + len(step.tokens)] == list(step.tokens)
        remaining = max_new - start
        if eos is None or eos not in step.tokens:
            assert len(step.tokens) == min(1 + step.n, remaining)
        assert step.drafts.tokens[0, 0] == tokens[step.position]
        assert min(step.forward_s, step.draft_s, step.other_s) >= 0.0
    assert len(tokens) <= max_new
    if eos is not None and eos in tokens:
        assert tokens.index(eos) == len(tokens) - 1 and result.stopped == "eos"


def greedy_reference(model: BlockwiseLM, prompt: list[int], max_new: int,
                     data: st.DataObject) -> tuple[list[int], int | None]:
    full = greedy_generate(model, prompt, max_new)
    eos = data.draw(st.one_of(st.none(), st.sampled_from(full)), label="eos")
    return (full if eos is None else full[: full.index(eos) + 1]), eos


MODELS = dict(
    seed=st.integers(0, 10**6),
    vocab=st.sampled_from([50, 64, 100]),
    h=st.integers(2, 5),
    scale=st.sampled_from([1.0, 10.0, 30.0]),
    head_scale=st.sampled_from([0.0, 0.5, 2.0]),
)
LOSSLESS_CASES = dict(
    **MODELS, k=st.integers(1, 6), p=st.integers(1, 4),
    strategy=st.sampled_from(["vanilla", "0gram", "oracle", "iad"]),
    prompt=st.lists(st.integers(0, 49), min_size=1, max_size=12),
    max_new=st.integers(1, 40), data=st.data(),
)


def lossless_case(random_model, oracle_drafter, seed: int, vocab: int, h: int,  # type: ignore[no-untyped-def]
                  scale: float, head_scale: float, k: int, p: int, strategy: str,
                  prompt: list[int], max_new: int, data: st.DataObject) -> None:
    """``decode(criterion="exact")`` equals greedy decoding token for token."""
    model = random_model(seed, vocab, h, scale, head_scale)
    ref, eos = greedy_reference(model, prompt, max_new, data)
    kwargs: dict[str, Any] = {}
    if strategy == "vanilla":
        kwargs = dict(k=k)
    elif strategy == "0gram":
        kwargs = dict(k=k, p=p)
    elif strategy == "oracle":
        kwargs = dict(drafter=oracle_drafter(len(prompt), ref, p=p, seed=seed))
    else:
        kwargs = dict(k=k, p=p, iad=True)
    result = decode(model, prompt, max_new_tokens=max_new, eos_id=eos, criterion="exact",
                    **kwargs)
    assert result.tokens == ref
    check_counting(result, h, max_new, eos)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**LOSSLESS_CASES)
def test_exact_decode_is_lossless(random_model, oracle_drafter, **case: Any) -> None:  # type: ignore[no-untyped-def]
    lossless_case(random_model, oracle_drafter, **case)


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**LOSSLESS_CASES)
def test_exact_decode_is_lossless_many(random_model, oracle_drafter, **case: Any) -> None:  # type: ignore[no-untyped-def]
    lossless_case(random_model, oracle_drafter, **case)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**MODELS, k=st.integers(1, 6), p=st.integers(1, 3),
       prompt=st.lists(st.integers(0, 49), min_size=1, max_size=12),
       max_new=st.integers(1, 30), data=st.data())
def test_exact_decode_with_ngram_rescoring_is_lossless(  # type: ignore[no-untyped-def]
        random_model, ngram_rescorer, seed: int, vocab: int, h: int, scale: float,
        head_scale: float, k: int, p: int, prompt: list[int], max_new: int,
        data: st.DataObject) -> None:
    model = random_model(seed, vocab, h, scale, head_scale)
    ref, eos = greedy_reference(model, prompt, max_new, data)
    result = decode(model, prompt, rescorer=ngram_rescorer, k=k, p=p, max_new_tokens=max_new,
                    eos_id=eos)
    assert result.tokens == ref
    check_counting(result, h, max_new, eos)
    assert all(s.source.startswith("ngram") for s in result.steps)  # the accepted node's


@pytest.fixture(scope="module")
def ngram_rescorer(tiny_ngram):  # type: ignore[no-untyped-def]
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

    return NgramRescorer(NgramLM(tiny_ngram), alpha=1.0)


def test_oracle_drafts_reach_every_accepted_length(random_model, oracle_drafter) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=7, vocab=64, h=5)
    prompt = [5, 6, 7]
    ref = greedy_generate(model, prompt, 60)
    for p in (1, 4):
        result = decode(model, prompt, drafter=oracle_drafter(3, ref, p=p, seed=1),
                        max_new_tokens=60)
        assert result.tokens == ref
        assert {n for s in result.steps for n in s.accept_lengths} == {0, 1, 2, 3, 4}
        check_counting(result, 5, 60, None)
    assert all(s.n == max(s.accept_lengths) for s in result.steps)  # the best of 4 wins


def test_min_block_h_accepts_whole_blocks(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=4, vocab=64, h=4)
    result = decode(model, [1, 2, 3], criterion="min_block:l=4", max_new_tokens=21, p=1)
    assert result.accept_lengths == [3] * 5 and result.calls == 6
    assert result.block_efficiency == pytest.approx(21 / 6)
    assert result.criterion == "min_block:l=4"
    for c in ("topk:k=3", "distance:eps=2", "gadpp:beta=4,tau=2.0", "typical:eps=0.2,delta=0.4"):
        for kw in ({"p": 1}, {}):  # vanilla drafts, and the default tree
            r = decode(model, [1, 2, 3], criterion=c, max_new_tokens=20, **kw)
            check_counting(r, 4, 20, None)


def test_eos_lengths_and_prefill_only(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=11, vocab=64, h=4)
    prompt = [9, 8, 7]
    free = greedy_generate(model, prompt, 30)
    assert decode(model, prompt, max_new_tokens=30).stopped == "max_new_tokens"
    eos = free[0]
    first = decode(model, prompt, max_new_tokens=30, eos_id=eos)
    assert first.tokens == [eos] and first.calls == 1 and first.stopped == "eos"
    assert first.block_efficiency == 1.0
    one = decode(model, prompt, max_new_tokens=1)
    assert one.tokens == free[:1] and one.calls == 1 and one.steps == ()
    none = decode(model, prompt, max_new_tokens=0)
    assert none.tokens == [] and none.calls == 0 and none.block_efficiency == 0.0
    # EOS inside the prompt is ordinary context (documented): only a generated EOS stops
    inner = [eos, 4, eos, 5]
    ref = greedy_generate(model, inner, 20, eos_id=eos)
    assert decode(model, inner, max_new_tokens=20, eos_id=eos).tokens == ref


def test_several_prompts_one_at_a_time(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=12, vocab=64, h=3)
    prompts = [[1, 2, 3], [4, 5], [6]]
    many = decode(model, prompts, k=4, p=2, max_new_tokens=12)
    assert isinstance(many, list) and len(many) == 3
    for prompt, result in zip(prompts, many, strict=True):
        single = decode(model, prompt, k=4, p=2, max_new_tokens=12)
        assert isinstance(single, DecodeResult)
        assert result.tokens == single.tokens == greedy_generate(model, prompt, 12)
    rows = decode(model, torch.tensor([[1, 2, 3], [7, 8, 9]]), max_new_tokens=5)
    assert [r.tokens for r in rows] == [greedy_generate(model, x, 5) for x in ([1, 2, 3],
                                                                               [7, 8, 9])]
    assert decode(model, np.array([1, 2, 3]), max_new_tokens=5).tokens == many[0].tokens[:5]


def test_iad_copies_the_prompt(chain_model) -> None:  # type: ignore[no-untyped-def]
    model, order = chain_model(vocab=64, h=4)
    o = order.tolist()
    prompt = o[0:20] + [o[40], o[50], o[3]]  # the chain o[0..19], noise, then o[3]
    ref = greedy_generate(model, prompt, 30)
    assert ref == o[4:34]
    vanilla = decode(model, prompt, max_new_tokens=30, p=1)
    copied = decode(model, prompt, max_new_tokens=30, iad=True)
    assert vanilla.tokens == copied.tokens == ref
    assert vanilla.block_efficiency == 1.0  # the extra heads copy head 1: drafts fail
    sources = [s.source for s in copied.steps]
    assert sources[:4] == ["iad"] * 4 and copied.accept_lengths[:4] == [3] * 4
    assert copied.block_efficiency > 1.5
    labels = copied.steps[0].tree.labels
    assert labels is not None and {"lattice", "iad"} <= set(labels)
    # the same through an explicit drafter, and the IAD drafter alone
    explicit = decode(model, prompt, max_new_tokens=30,
                      drafter=CombinedDrafter(HeadDrafter(k=2, p=2), InputCopyDrafter(prompt)))
    alone = decode(model, prompt, max_new_tokens=30, drafter=InputCopyDrafter(prompt))
    assert explicit.tokens == alone.tokens == ref
    assert alone.block_efficiency == copied.block_efficiency


class BadDrafter:
    """Roots its trees at the wrong token."""

    name = "bad"
    needs = Needs(k=1)

    def draft(self, view: StepView) -> DraftTree:
        tree = HeadDrafter().draft(view)
        tokens = tree.tokens.copy()
        tokens[0] = (tokens[0] + 1) % 64
        return DraftTree(tokens=tokens, parents=tree.parents, scores=tree.scores)

    def observe(self, feedback: Feedback) -> None:
        pass


def test_bad_input(random_model, tiny_ngram, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer
    from blockdraft.training.ngram import train_ngram

    model = random_model(seed=0, vocab=64, h=4, max_seq_len=32)

    def raises(message: str, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_new_tokens", 4)
        with pytest.raises(VerifyError, match=message):
            decode(model, *args, **kwargs)

    raises("the prompt has 33 tokens, more than max_seq_len = 32, the model's context",
           [1] * 33, max_new_tokens=1)
    raises(r"30 tokens \+ max_new_tokens = 4 needs 33 positions.*max_new_tokens <= 3",
           [1] * 30, max_new_tokens=4)
    assert len(decode(model, [1] * 30, max_new_tokens=3).tokens) == 3  # 32 positions exactly
    raises("the prompt is empty", [])
    raises("prompt 1: the prompt is empty", [[1, 2], []])
    raises(r"token id 64 is outside the model's vocabulary \[0, 64\)", [1, 64])
    raises("prompt ids must be integers", [1.5, 2.0])
    raises(r"k = 65 exceeds the model's vocabulary size V = 64", [1], k=65)
    raises("p must be an integer >= 1, got 0", [1], p=0)
    raises("k must be an integer >= 1, got 0", [1], k=0)
    raises("max_new_tokens must be an integer >= 0, got -1", [1], max_new_tokens=-1)
    raises(r"eos_id must be None or a token id in \[0, 64\), got 64", [1], eos_id=64)
    raises("gadpp.*tau must be >= 0, got -1", [1], criterion="gadpp:beta=2,tau=-1")
    raises("typical.*eps is a probability", [1], criterion="typical:eps=2,delta=1")
    raises("unknown acceptance criterion 'fast'", [1], criterion="fast")
    raises("not both", [1], drafter=HeadDrafter(), rescorer=object())
    raises("rescorer must have rescore", [1], rescorer=object())
    raises("drafter must be a Drafter", [1], drafter=object())
    raises(r"bad proposed a tree rooted at \d+; the root must be the certain token", [1],
           drafter=BadDrafter())
    raises(r"the model is on cpu but device = 'cuda'.*model.to\('cuda'\)", [1], device="cuda")
    # an n-gram LM over another vocabulary (ids up to 99) does not fit a 64-token model
    wide = train_ngram([list(range(100)), list(range(99, -1, -1))], tmp_path / "wide", order=2,
                       memory="64M")
    other = NgramRescorer(NgramLM(wide.arpa))
    raises("the rescorer's LM does not fit the model.*knows token id 99", [1], rescorer=other)
    raises("does not fit", [1], drafter=HeadDrafter(k=2, rescorer=other))
    fits = NgramRescorer(NgramLM(tiny_ngram))
    assert decode(model, [1, 2], rescorer=fits, k=3, max_new_tokens=3).calls >= 1


def test_training_mode_is_restored(random_model) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=1, vocab=64, h=3).train()
    ref = greedy_generate(model, [1, 2], 10)
    assert decode(model, [1, 2], max_new_tokens=10).tokens == ref
    assert model.training


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu(random_model, oracle_drafter) -> None:  # type: ignore[no-untyped-def]
    model = random_model(seed=21, vocab=100, h=5)
    prompt = [3, 1, 4, 1, 5]
    cpu = decode(model, prompt, k=4, p=3, max_new_tokens=40)
    ref = greedy_generate(model, prompt, 40)
    oracle = decode(model, prompt, drafter=oracle_drafter(len(prompt), ref, p=3),
                    max_new_tokens=40)
    model = model.to("cuda")
    gpu = decode(model, prompt, k=4, p=3, max_new_tokens=40, device="cuda")
    gpu_oracle = decode(model, prompt, drafter=oracle_drafter(len(prompt), ref, p=3),
                        max_new_tokens=40, device="cuda")
    assert gpu.tokens == cpu.tokens == ref
    assert gpu.accept_lengths == cpu.accept_lengths
    assert gpu_oracle.tokens == oracle.tokens == ref
    assert gpu_oracle.accept_lengths == oracle.accept_lengths


def test_neural_rescorer_of_another_vocabulary(random_model) -> None:  # type: ignore[no-untyped-def]
    """A RescorerLM whose ids merely fit the model (V = 32 < 64) is still another tokenizer."""
    import torch

    from blockdraft.models import BlockwiseConfig, RescorerLM
    from blockdraft.rescorers.neural import NeuralRescorer

    model = random_model(seed=0, vocab=64, h=4, max_seq_len=32)

    def rescorer(vocab: int) -> NeuralRescorer:
        torch.manual_seed(0)
        cfg = BlockwiseConfig(vocab_size=vocab, h=1, n_layer=1, n_head=2, d_model=16, d_ff=32,
                              max_seq_len=32)
        return NeuralRescorer(RescorerLM(cfg))

    with pytest.raises(VerifyError, match=r"V = 32 but the model has V = 64"):
        decode(model, [1, 2], rescorer=rescorer(32), k=2, max_new_tokens=3)
    with pytest.raises(VerifyError, match=r"another tokenizer"):
        decode(model, [1, 2], drafter=HeadDrafter(k=2, rescorer=rescorer(80)), max_new_tokens=3)
    assert decode(model, [1, 2], rescorer=rescorer(64), k=2, max_new_tokens=3).calls >= 1


def test_device_defaults_to_the_models_own() -> None:
    """Told no device, decode takes the model's (a model on a GPU needs no device="cuda");
    a device named is checked against it."""
    import torch

    from blockdraft.verify.errors import VerifyError
    from blockdraft.verify.inputs import _check_device

    class OnGPU:
        device = torch.device("cuda", 0)

    _check_device(OnGPU(), None)
    _check_device(OnGPU(), "cuda")
    _check_device(OnGPU(), "cuda:0")
    with pytest.raises(VerifyError, match=r"the model is on cuda:0 but device = 'cpu'"):
        _check_device(OnGPU(), "cpu")
    with pytest.raises(VerifyError, match=r"the model is on cuda:0 but device = 'cuda:1'"):
        _check_device(OnGPU(), "cuda:1")
