"""Training an EAGLE draft layer on a distillation set (training/heads: eagle_data, eagle_train,
the shared loop): the features line up with the stored states, training lowers the held-out
loss and writes a layer that loads, a run resumes to the same layer, the offline chain measure
equals a step-by-step greedy chain walk, and bad settings or bases are refused by name."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from heads_testlib import tiny_llama  # noqa: E402

from blockdraft.models.heads.eagle_files import eagle_record, read_eagle  # noqa: E402
from blockdraft.models.heads.eagle_layer import EagleLayer  # noqa: E402
from blockdraft.training import TrainingError  # noqa: E402
from blockdraft.training.heads import HeadsTrainSettings, write_trained_heads  # noqa: E402
from blockdraft.training.heads.data_curve import read_run  # noqa: E402
from blockdraft.training.heads.eagle_data import FeatureMaker, load_sequences  # noqa: E402
from blockdraft.training.heads.eagle_train import (  # noqa: E402
    EAGLE_DEFAULTS,
    evaluate_eagle,
    score_eagle,
    score_eagle_runs,
    train_eagle,
)
from blockdraft.training.heads.positions import IGNORE, load_positions  # noqa: E402


def eagle(fusion: str = "top", **kw: Any) -> HeadsTrainSettings:
    """3 draft steps scored, 40 steps of 8 answers over a 64-token shortlist."""
    fields: dict[str, Any] = {
        "arch": "eagle", "fusion": fusion, "heads": 3, "steps": 40, "batch": 8, "lr": 3e-3,
        "warmup": 5, "eval_every": 20, "eval_positions": 400, "vocab": "shortlist",
        "shortlist": 64, **EAGLE_DEFAULTS[fusion]}
    fields.update(kw)
    return HeadsTrainSettings(**fields)


def base() -> Any:
    return tiny_llama(init=0.1)  # the base the dataset fixture was distilled from


def test_forward_features_line_up_with_the_stored_states(dataset: Any) -> None:
    """The final norm's output from one forward over prompt + answer, at the answer's
    positions, is the state the set stored (generated with a KV cache); the tokens are the
    text after each position, the targets the base's token after that."""
    seqs = load_sequences(dataset, "heldout", stored=True)
    picked = [0, 3]
    prompt = FeatureMaker("top", "prompt", base()).batch(seqs, picked)
    stored = FeatureMaker("top", "answer").batch(seqs, picked)
    for b, s in enumerate(picked):
        n, m = seqs.prompts[s].size, seqs.answers[s].size
        root = int(prompt.roots[b])
        assert root == n - 1 and int(stored.roots[b]) == 0
        torch.testing.assert_close(prompt.features[b, root:root + m], stored.features[b, :m],
                                   rtol=1e-4, atol=1e-4)
        assert prompt.tokens[b, root:root + m].tolist() == seqs.texts[s].tolist()
        assert prompt.targets[b, :root].eq(IGNORE).all()
        assert prompt.targets[b, root:root + m - 1].tolist() == seqs.answers[s][1:].tolist()
        assert stored.targets[b, :m - 1].tolist() == seqs.answers[s][1:].tolist()
        assert int(stored.targets[b, m - 1]) == IGNORE
        assert stored.positions[b, :m].tolist() == list(range(n - 1, n - 1 + m))
    # step k scores only rows whose root is k rows back inside the answer
    assert not prompt.valid(2)[0, :int(prompt.roots[0]) + 2].any()
    model = base()
    layers = FeatureMaker("layers", "answer", model, (1, 2)).batch(seqs, picked)
    assert layers.features.shape[-1] == 64 and layers.features.shape[1] == stored.features.shape[1]
    # index i is HF's hidden_states[i]: the residual stream entering decoder layer i
    s, n, m = picked[0], seqs.prompts[picked[0]].size, seqs.answers[picked[0]].size
    row = torch.tensor([np.concatenate([seqs.prompts[s], seqs.texts[s][:-1]]).tolist()])
    with torch.no_grad():
        hidden = model(row, output_hidden_states=True).hidden_states[1][0]
    torch.testing.assert_close(layers.features[0, :m, :32], hidden[n - 1:n - 1 + m],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fusion", ["top", "layers"])
def test_training_lowers_the_heldout_loss_and_writes_a_layer_that_loads(
        dataset: Any, tmp_path: Path, fusion: str) -> None:
    run = eagle(fusion)
    model = base()
    result = train_eagle(dataset, model, tmp_path / "w", run, log=None, progress=False)
    layer = result.heads
    assert isinstance(layer, EagleLayer) and result.finished and result.step == 40
    assert [c["step"] for c in result.curve] == [20, 40]
    assert len(result.curve[-1]["top1"]) == 3 and result.curve[-1]["chain_B"] >= 1.0
    assert f"fusion:{fusion}" in result.signature and "arch:eagle" in result.signature
    # against a fresh layer on the same held-out answers
    maker = FeatureMaker(fusion, run.context, model, layer.config.fuse_layers)
    held = load_sequences(dataset, "heldout", maker.stored)
    picked = list(range(len(held)))
    batches = [maker.batch(held, picked[i:i + 8]) for i in range(0, len(picked), 8)]
    remap = torch.full((100,), IGNORE)
    assert layer.shortlist is not None and layer.shortlist.numel() == 64
    remap[layer.shortlist] = torch.arange(64)
    torch.manual_seed(run.seed)
    fresh = EagleLayer(layer.config, layer.shortlist).attach(
        model.get_input_embeddings().weight, model.get_output_embeddings().weight)
    data = held.positions(picked)
    before = evaluate_eagle(fresh.eval(), batches, data, run, remap)
    after = evaluate_eagle(layer, batches, data, run, remap)
    assert after["loss"] < 0.8 * before["loss"]
    assert np.mean(after["top1"]) > np.mean(before["top1"]) + 0.1
    # written (bfloat16) and read back: the same layer up to rounding, its record kept
    folder = write_trained_heads(result, tmp_path / "out", "tiny", record={"context":
                                                                           run.context})
    back = read_eagle(folder, model.get_input_embeddings().weight,
                      model.get_output_embeddings().weight)
    assert back.config == layer.config and torch.equal(back.shortlist, layer.shortlist)
    assert eagle_record(folder) == {"context": run.context}
    b = batches[0]
    with torch.no_grad():
        torch.testing.assert_close(back(b.features, b.tokens, b.positions).logits,
                                   layer(b.features, b.tokens, b.positions).logits,
                                   rtol=0.05, atol=0.05)


def test_a_resumed_run_equals_an_uninterrupted_one(dataset: Any, tmp_path: Path) -> None:
    run = eagle("layers", steps=20, eval_every=5)
    whole = train_eagle(dataset, base(), tmp_path / "a", run, log=None, progress=False)
    part = train_eagle(dataset, base(), tmp_path / "b", run, stop_after=7, log=None,
                       progress=False)
    assert part.step == 7 and not part.finished
    rest = train_eagle(dataset, base(), tmp_path / "b", run, log=None, progress=False)
    assert rest.finished and rest.best_step == whole.best_step
    for key, value in whole.heads.state_dict().items():
        torch.testing.assert_close(rest.heads.state_dict()[key], value)
    with pytest.raises(TrainingError, match="unroll=3 \\(now 4\\)"):
        train_eagle(dataset, base(), tmp_path / "b", dataclasses.replace(run, unroll=4),
                    log=None, progress=False)


def _walk(layer: EagleLayer, maker: FeatureMaker, seqs: Any, depth: int) -> float:
    """B of greedy chain drafting along each answer, step by step: from each root the layer
    drafts ``depth`` tokens on its own (no teacher forcing), the run that equals the answer is
    accepted with the base's bonus token, and the next root follows it."""
    tokens = calls = 0
    for s in range(len(seqs)):
        batch = maker.batch(seqs, [s])
        m, root0 = int(batch.lengths[0]), int(batch.roots[0])
        answer = seqs.answers[s].tolist()
        j, calls = 0, calls + 1  # the prefill: y_1 and a draft from h_0
        while j + 1 < m:
            end = root0 + j + 1  # the context: every position up to the root h_j
            chain = layer.draft_chain(batch.features[:, :end], batch.tokens[:, :end],
                                      batch.positions[:, :end], depth)
            accepted = 0
            for k, token in enumerate(chain.tokens[0].tolist()):
                if j + 1 + k > m - 1 or token != answer[j + 1 + k]:
                    break
                accepted += 1
            j += accepted + 1
            calls += 1
        tokens += m
    return tokens / calls


@pytest.mark.parametrize("fusion", ["top", "layers"])
def test_the_chain_measure_equals_a_step_by_step_greedy_walk(dataset: Any, tmp_path: Path,
                                                              fusion: str) -> None:
    run = eagle(fusion, steps=30)
    model = base()
    layer = train_eagle(dataset, model, tmp_path / "w", run, log=None, progress=False).heads
    assert isinstance(layer, EagleLayer)
    maker = FeatureMaker(fusion, run.context, model, layer.config.fuse_layers)
    scores = score_eagle(layer, dataset, maker, depth=4)
    walked = _walk(layer, maker, load_sequences(dataset, "heldout", maker.stored), 4)
    assert scores["B_vanilla"] == pytest.approx(walked)
    assert scores["B_chain"][-1] == scores["B_vanilla"] and len(scores["B_chain"]) == 4
    assert 1.0 < scores["B_chain"][0] <= scores["B_chain"][-1] <= scores["B_oracle5"]
    assert len(scores["top1"]) == 4
    held = load_positions(dataset, "heldout")
    assert scores["positions"][0] == int((held.remaining >= 1).sum())
    # heads curve's path: the written folder read as a run, scored the same way
    result_dir = tmp_path / "w"
    assert (result_dir / "checkpoint.pt").is_file()
    with pytest.raises(TrainingError, match="EAGLE draft layer's training folder"):
        read_run(result_dir)


def test_heads_curve_scores_a_written_layer(dataset: Any, tmp_path: Path) -> None:
    run = eagle("top", steps=10, eval_every=10)
    model = base()
    result = train_eagle(dataset, model, tmp_path / "w", run, log=None, progress=False)
    folder = write_trained_heads(result, tmp_path / "out", "tiny",
                                 record={"context": run.context})
    rows = score_eagle_runs([read_run(folder)], dataset, model,
                            model.get_output_embeddings().weight.detach(),
                            model.get_input_embeddings().weight.detach(), depth=3, log=None)
    assert len(rows) == 1 and len(rows[0]["top1"]) == 3 and rows[0]["B_vanilla"] >= 1.0
    assert rows[0]["step"] == result.best_step


def test_bad_settings_and_bases_are_refused_by_name(dataset: Any, tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="feature_weight 10.0 applies to fusion 'top'"):
        eagle("layers", feature_weight=10.0).check()
    with pytest.raises(TrainingError, match="vocab 'seen' does not apply"):
        eagle(vocab="seen").check()
    with pytest.raises(TrainingError, match="context must be"):
        eagle(context="all").check()
    model = base()
    model.config.hidden_act = "gelu"
    with pytest.raises(TrainingError, match="activation is 'gelu'"):
        train_eagle(dataset, model, tmp_path / "w", eagle(), log=None, progress=False)
    with pytest.raises(TrainingError, match="train_eagle"):
        from blockdraft.training.heads import lm_head_weight, train_heads

        train_heads(dataset, lm_head_weight(base()), tmp_path / "m", eagle(), log=None,
                    progress=False)
    assert not (tmp_path / "w").exists() and not (tmp_path / "m").exists()
