"""The model on a CUDA device (skipped without one): cache equivalence, greedy, train, load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from blockdraft.models import (
    BlockwiseConfig,
    BlockwiseLM,
    greedy_generate,
    load_model,
    save_model,
)
from blockdraft.training import TrainConfig, train

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]


def test_cuda_end_to_end(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=64), device="cuda")
    assert model.device.type == "cuda"
    data = np.random.default_rng(0).integers(0, 64, 2000)
    train(model, data, TrainConfig(steps=3, batch_size=4, seq_len=16), progress=False)
    x = torch.randint(0, 64, (2, 12), device="cuda")
    with torch.no_grad():
        full, _ = model.heads_logits(x)
        a, past = model.heads_logits(x[:, :5])
        b, _ = model.heads_logits(x[:, 5:], past)
    torch.testing.assert_close(torch.cat((a, b), 1), full, atol=1e-4, rtol=1e-4)
    out = greedy_generate(model, [1, 2, 3], 8)
    assert len(out) == 8 and all(0 <= t < 64 for t in out)
    cpu_model = load_model(save_model(model, tmp_path), device="cpu")
    with torch.no_grad():
        on_cpu, _ = cpu_model.heads_logits(x.cpu())
    torch.testing.assert_close(on_cpu, full.cpu(), atol=1e-4, rtol=1e-4)
    assert load_model(tmp_path, device="cuda").device.type == "cuda"
