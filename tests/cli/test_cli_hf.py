"""The CLI with a Hugging Face model (a tiny random Llama with a real BPE tokenizer and a chat
template, saved to a folder, plus Medusa heads): ``decode`` (plain and ``--chat``, lossless
against greedy), ``trace``, ``ngram train --tokenizer`` over the model's token ids (and the
refusal of an LM from another tokenizer), ``train --rescorer --tokenizer`` over them, and
``train --mode medusa`` (its call into ``blockdraft.training.heads.recipe``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from blockdraft.cli import main  # noqa: E402

TEXT = [
    "Python lists keep their items in order and grow as you append to them.",
    "A dictionary maps keys to values; looking a key up takes constant time on average.",
    "The capital of France is Paris, and the Seine runs through the city.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "Functions in Python are objects: you can pass them to other functions.",
    "The moon goes around the earth about once every twenty-seven days.",
] * 4
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _hf_tokenizer(chat: bool) -> Any:
    """A byte-level BPE (blockdraft's trainer) as a transformers tokenizer, chat tokens added."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    from blockdraft.models import Tokenizer

    backend = Tokenizer.train(TEXT, vocab_size=300).backend
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t in ("<|im_start|>", "<|im_end|>")])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>",
                                  bos_token="<|endoftext|>", pad_token="<pad>")
    if chat:
        tok.chat_template = CHAT
    return tok


def _folder(root: Path, chat: bool, seed: int = 0) -> tuple[Path, Path]:
    """(model folder, heads folder): a tiny Llama over the tokenizer (V padded to 320)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from blockdraft.models.hf import MedusaHeads, write_heads

    tok = _hf_tokenizer(chat)
    torch.manual_seed(seed)
    base = LlamaForCausalLM(LlamaConfig(
        vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=tok.eos_token_id,
        pad_token_id=1, initializer_range=0.1)).eval()
    folder = root / ("chat-llama" if chat else "llama")
    base.save_pretrained(folder)
    tok.save_pretrained(folder)
    heads = MedusaHeads(32, None, 3, 1)
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return folder, write_heads(heads, root / ("chat-heads" if chat else "heads"))


@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    model, heads = _folder(root, chat=True)
    plain, plain_heads = _folder(root, chat=False)
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    return {"model": model, "heads": heads, "plain": plain, "plain_heads": plain_heads,
            "corpus": corpus, "root": root}


def _run_json(capsys: Any, argv: list[str]) -> Any:
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_decode_an_hf_model_plain_and_chat(hf_folders: dict[str, Path], capsys: Any) -> None:
    from blockdraft.models import greedy_generate, load_model

    m, h = str(hf_folders["model"]), str(hf_folders["heads"])
    common = ["decode", "--model", m, "--heads", h, "--max-new-tokens", "12", "--k", "3",
              "--compare-greedy", "--json"]
    plain = _run_json(capsys, [*common, "--prompt", "Python lists", "--p", "2"])
    chat = _run_json(capsys, [*common, "--prompt", "Python lists", "--chat"])
    model = load_model(m, heads=h)
    tok = model.tokenizer
    assert tok is not None
    ids = tok.encode("Python lists")
    assert plain["prompt_tokens"] == len(ids)
    assert plain["tokens"] == greedy_generate(model, ids, 12, eos_id=tok.eos_id)
    wrapped = tok.apply_chat_template([{"role": "user", "content": "Python lists"}])
    assert chat["prompt_tokens"] == len(wrapped) > len(ids)
    assert chat["tokens"] == greedy_generate(model, wrapped, 12, eos_id=tok.eos_id)
    assert chat["greedy_s"] is not None
    # bfloat16 runs; it is not compared with greedy: a chunked forward may round a near-tie
    # differently (on CPUs with native bfloat16 units it does on this tiny model)
    no_compare = [a for a in common if a != "--compare-greedy"]
    bf16 = _run_json(capsys, [*no_compare, "--prompt", "Python lists", "--dtype", "bfloat16"])
    assert len(bf16["tokens"]) == 12 and bf16["greedy_s"] is None


def test_decode_on_the_static_runtime(hf_folders: dict[str, Path], capsys: Any) -> None:
    """``--runtime static``: the same tokens as PyTorch eager's greedy; bfloat16 through
    ``--dtype`` (``--precision`` stays ONNX Runtime's)."""
    m, h = str(hf_folders["model"]), str(hf_folders["heads"])
    common = ["decode", "--model", m, "--heads", h, "--max-new-tokens", "12", "--k", "3",
              "--prompt", "Python lists", "--runtime", "static", "--json"]
    torch_run = _run_json(capsys, [*common[:-3], "--json"])
    static_run = _run_json(capsys, [*common, "--p", "2", "--compare-greedy"])
    assert static_run["tokens"] == torch_run["tokens"]
    bf16 = _run_json(capsys, [*common, "--dtype", "bfloat16"])
    assert len(bf16["tokens"]) == 12
    code = main([*common, "--precision", "int8"])
    assert code == 2 and "--precision int8 is for --runtime onnxruntime" in \
        capsys.readouterr().err


def test_chat_needs_a_chat_template(hf_folders: dict[str, Path], capsys: Any) -> None:
    code = main(["decode", "--model", str(hf_folders["plain"]), "--heads",
                 str(hf_folders["plain_heads"]), "--prompt", "x", "--chat"])
    assert code == 1 and "has no chat template" in capsys.readouterr().err


def test_trace_an_hf_model(hf_folders: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    from blockdraft.oracle import Trace

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Python lists\nThe capital of France\n", encoding="utf-8")
    assert main(["trace", "--model", str(hf_folders["model"]), "--heads",
                 str(hf_folders["heads"]), "--prompts", str(prompts), "-o",
                 str(tmp_path / "trace"), "--max-new-tokens", "8", "--K", "4", "--chat"]) == 0
    trace = Trace.open(tmp_path / "trace")
    assert trace.num_examples == 2 and trace.h == 4 and trace.V == 320
    assert trace.signature["chat"] in (True, "True")
    # the heads are recorded by their weights, whatever folder brought them
    from blockdraft.models import load_model

    model = load_model(hf_folders["model"], heads=hf_folders["heads"])
    assert trace.signature["heads_digest"] == model.heads_digest
    with torch.no_grad():
        next(model.heads.parameters()).add_(1.0)
    assert model.heads_digest != trace.signature["heads_digest"]


def test_ngram_lm_over_the_models_token_ids(hf_folders: dict[str, Path], tmp_path: Path,
                                            capsys: Any) -> None:
    pytest.importorskip("kenlm")
    from blockdraft.rescorers.base import RescorerError
    from blockdraft.rescorers.ngram import NgramLM
    from blockdraft.training.ngram import train_ngram

    m, h = str(hf_folders["model"]), str(hf_folders["heads"])
    out = _run_json(capsys, ["ngram", "train", "--text", str(hf_folders["corpus"]),
                             "--tokenizer", m, "--order", "3", "-o", str(tmp_path / "lm3"),
                             "--json"])
    assert out["tokenizer"]["vocab_size"] == 320  # the model's V, not the tokenizer's 302
    lm = NgramLM(tmp_path / "lm3.bin")
    assert lm.tokenizer is not None and lm.tokenizer.vocab_size == 320
    res = _run_json(capsys, ["decode", "--model", m, "--heads", h, "--prompt", "Python lists",
                             "--chat", "--lm", str(tmp_path / "lm3.bin"), "--p", "2",
                             "--max-new-tokens", "10", "--compare-greedy", "--json"])
    assert "NgramRescorer" in res["drafter"] and res["tokens"]
    # An LM over another tokenizer of the same size is refused by its fingerprint...
    other = _hf_tokenizer(chat=False)
    other.add_tokens(["zzz"])  # shifts nothing, but changes the vocabulary
    from blockdraft.models.hf import HFTokenizer

    info = HFTokenizer(other, vocab_size=320).info("other")
    train_ngram([[5, 6, 7, 8]] * 3, tmp_path / "other", order=2, tokenizer=info)
    code = main(["decode", "--model", m, "--heads", h, "--prompt", "x", "--lm",
                 str(tmp_path / "other.bin")])
    assert code == 1 and "another tokenizer" in capsys.readouterr().err
    # ... and one over a vocabulary of another size by its V, although its ids fit.
    from blockdraft.models import Tokenizer

    small = Tokenizer.train(TEXT, vocab_size=280)
    train_ngram([[5, 6, 7, 8]] * 3, tmp_path / "small", order=2, tokenizer=small.info("bpe"))
    with pytest.raises(RescorerError, match="V = 280 tokens but the model's vocabulary has V"):
        NgramLM(tmp_path / "small.bin").check_vocab(320)


def test_train_a_rescorer_over_the_models_tokens(hf_folders: dict[str, Path], tmp_path: Path,
                                                 capsys: Any) -> None:
    from blockdraft.models import load_model, load_tokenizer
    from blockdraft.models.hf import HFTokenizer

    m, h = str(hf_folders["model"]), str(hf_folders["heads"])
    out = tmp_path / "rescorer"
    _run_json(capsys, ["train", "--rescorer", "--tokenizer", m, "--preset", "tiny", "--steps",
                       "3", "--batch-size", "2", "--seq-len", "8", "--eval-fraction", "0.3",
                       "--corpus",
                       str(hf_folders["corpus"]), "-o", str(out), "--json"])
    rescorer = load_model(out)
    assert rescorer.config.vocab_size == 320 and rescorer.config.h == 1
    tok = load_tokenizer(out)
    assert isinstance(tok, HFTokenizer) and tok.vocab_size == 320
    assert tok.fingerprint() == load_tokenizer(m).fingerprint()
    for backend in ("torch", "onnx"):
        res = _run_json(capsys, ["decode", "--model", m, "--heads", h, "--prompt",
                                 "Python lists", "--rescorer-model", str(out),
                                 "--neural-backend", backend, "--max-new-tokens", "8",
                                 "--compare-greedy", "--json"])
        assert "NeuralRescorer" in res["drafter"] and res["tokens"]
    # a rescorer of another vocabulary is refused before it indexes out of its embedding
    other = tmp_path / "other-rescorer"
    _run_json(capsys, ["train", "--rescorer", "--preset", "tiny", "--steps", "2",
                       "--batch-size", "2", "--seq-len", "8", "--eval-fraction", "0.3",
                       "--vocab-size", "280",
                       "--corpus", str(hf_folders["corpus"]), "-o", str(other), "--json"])
    code = main(["decode", "--model", m, "--heads", h, "--prompt", "x", "--rescorer-model",
                 str(other)])
    assert code == 1 and "train it with the model's tokenizer" in capsys.readouterr().err


def test_train_mode_medusa_calls_the_training_entry(monkeypatch: Any, tmp_path: Path,
                                                    capsys: Any) -> None:
    import blockdraft.training.heads as training

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    class Result:
        step, finished, curve, best_step = 7, True, [{"step": 7, "top1_mean": 0.5}], 7

    def fake(*args: Any, **kwargs: Any) -> Result:
        calls.append((args, kwargs))
        return Result()

    monkeypatch.setattr(training, "train_medusa_heads", fake)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"source": "x", "prompt": "hi"}\n', encoding="utf-8")
    out = _run_json(capsys, ["train", "--mode", "medusa", "--base", "smollm2", "--prompts",
                             str(prompts), "-o", str(tmp_path / "heads"), "--h", "4",
                             "--steps", "50", "--minutes", "1.5", "--threads", "1", "--json"])
    assert out["step"] == 7
    (args, kwargs), = calls
    # a new -o is built beside it and renamed in at the end (issue 42: checked at the rename)
    assert args[:2] == ("smollm2", [str(prompts)])
    assert args[2].parent == tmp_path and args[2].name.startswith(".heads.")
    assert kwargs["heads"] == 3 and kwargs["minutes"] == 1.5 and kwargs["threads"] == 1
    assert kwargs["settings"].steps == 50 and kwargs["settings"].heads == 3
    assert main(["train", "--mode", "medusa", "-o", str(tmp_path / "h")]) == 2
    assert "needs --prompts" in capsys.readouterr().err
    assert main(["train", "-o", str(tmp_path / "h")]) == 2
    assert "needs --corpus" in capsys.readouterr().err
