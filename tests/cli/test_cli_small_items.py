"""The smaller findings of issue 28, one test each (each failed before its fix): bad values
refused where they enter, before a model loads or a file is made, in one line that names the
option and the value; a damaged ONNX export rebuilt with one warning line from the command line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from test_cli_int8 import PROMPT, tiny_chat_llama  # noqa: E402
from test_output_probe import _shared_data  # noqa: E402

from blockdraft.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("items")
    model, heads = tiny_chat_llama(root)
    return {"model": model, "heads": heads, "root": root}


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))


def _last(err: str) -> str:
    return err.rstrip("\n").split("\n")[-1]


def _no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    import blockdraft.models

    def loaded(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(blockdraft.models, "load_model", loaded)


@pytest.mark.parametrize("flag,value,expected", [
    ("--max-new-tokens", "-1", "expected an integer >= 0, got '-1'"),
    ("--alpha", "nan", "expected a finite number, got 'nan'"),
    ("--alpha", "inf", "expected a finite number, got 'inf'"),
    ("--p", "0", "expected a positive integer (>= 1), got '0'"),
])
def test_decode_refuses_bad_values_before_the_model_loads(
        flag: str, value: str, expected: str, tmp_path: Path, capsys: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _no_loading(monkeypatch)
    with pytest.raises(SystemExit) as e:
        main(["decode", "--model", str(tmp_path / "m"), "--prompt", "hi", flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {expected}" in err, err


def test_too_many_threads_are_lowered_with_a_warning(tiny: dict[str, Path], capsys: Any
                                                     ) -> None:
    from blockdraft.cli.common import available_cores

    argv = ["decode", "--model", str(tiny["model"]), "--heads", str(tiny["heads"]), "--prompt",
            "hi", "--max-new-tokens", "2", "--threads", "1000", "--json"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert (f"blockdraft: warning: --threads 1000 is more than the {available_cores()} CPU "
            "core(s) this process may use; using") in err, err


def test_trace_ids_name_a_negative_id_before_the_model_loads(tmp_path: Path, capsys: Any,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """As filed: `trace --ids` with a negative id said "outside [0, None)"."""
    _no_loading(monkeypatch)
    ids = tmp_path / "ids.txt"
    ids.write_text("5 6 7\n3 -2 4\n")
    code = main(["trace", "--model", str(tmp_path / "m"), "--prompts", str(ids), "--ids",
                 "-o", str(tmp_path / "trace")])
    err = capsys.readouterr().err
    assert code == 1 and _last(err) == (f"blockdraft: error: {ids}:2: token id -2 is negative; "
                                        "token ids are >= 0"), err
    assert not (tmp_path / "trace").exists()


def test_greedy_names_a_negative_id_without_a_vocabulary_bound() -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from blockdraft.models import ModelError, greedy_generate
    from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads

    base = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=2,
                                        num_key_value_heads=1)).eval()
    model = HFBlockwiseModel(base, MedusaHeads(32, None, 2, 1))
    with torch.no_grad(), pytest.raises(ModelError) as e:
        greedy_generate(model, [3, -2, 4], 2)
    assert "token id -2 is negative" in str(e.value) and "None" not in str(e.value)


def test_prompt_weights_must_be_finite(tmp_path: Path, capsys: Any) -> None:
    """As filed: --weights explain=inf said "cannot convert float NaN to integer"."""
    data = _shared_data(tmp_path)
    with pytest.raises(SystemExit) as e:  # issue 42: refused at the parser, exit 2
        main(["heads", "prompts", "--data", str(data), "-n", "4", "--weights",
              "explain=inf", "-o", str(tmp_path / "p.jsonl")])
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert "argument --weights: explain: expected a finite number, got 'inf'" in err, err
    assert not (tmp_path / "p.jsonl").exists()
    for bad, said in (("explain=1,,rewrite=1", "item 2 of 'explain=1,,rewrite=1' is empty"),
                      ("explain=1,explain=2", "'explain' appears twice"),
                      ("explain=-1", "explain: expected a number >= 0, got '-1'"),
                      ("explain=0", "expected at least one weight > 0")):
        with pytest.raises(SystemExit):
            main(["heads", "prompts", "--data", str(data), "--weights", bad, "-o", "p.jsonl"])
        assert said in capsys.readouterr().err, bad


def test_distill_names_its_folder_option(tmp_path: Path, capsys: Any) -> None:
    """As filed: the message named -o where the option is --folder."""
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "plan.json").write_text("{}")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(4)))
    assert main(["heads", "distill", "--prompts", str(prompts), "--folder", str(folder)]) == 1
    err = _last(capsys.readouterr().err)
    assert err.startswith(f"blockdraft: error: --folder {folder} already holds files"), err
    assert " -o " not in err


def test_heads_train_does_not_make_a_set_it_will_not_fill(tiny: dict[str, Path],
                                                          tmp_path: Path, capsys: Any) -> None:
    """As filed: `heads train --data MISSING --distill-minutes 0` made MISSING/plan.json
    before it failed."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i}?"}) + "\n"
                               for i in range(6)))
    missing = tmp_path / "missing"
    code = main(["heads", "train", "--base", str(tiny["model"]), "--prompts", str(prompts),
                 "--heldout-min", "2", "--data", str(missing), "--distill-minutes", "0", "-o",
                 str(tmp_path / "heads")])
    err = _last(capsys.readouterr().err)
    assert code == 1 and "holds no distillation set" in err and "0 minutes" in err, err
    assert not missing.exists() and not (tmp_path / "heads").exists()


def test_a_damaged_export_is_rebuilt_from_the_command_line_with_one_warning(
        tiny: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    """Finding 1 as filed: 32 MB zeroed inside body.onnx.data, and decode returned rc 0 with
    other tokens (here a quarter of the tiny file)."""
    pytest.importorskip("onnxruntime")
    argv = ["decode", "--model", str(tiny["model"]), "--heads", str(tiny["heads"]), "--prompt",
            PROMPT, "--runtime", "onnxruntime", "--max-new-tokens", "8", "--threads", "1",
            "--json"]
    assert main(argv) == 0
    want = json.loads(capsys.readouterr().out)["tokens"]
    (data,) = (tmp_path / "cache" / "onnx").glob("*/body.onnx.data")
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 4: len(raw) // 2] = bytes(len(raw) // 2 - len(raw) // 4)
    data.write_bytes(bytes(raw))
    assert main(argv) == 0
    out = capsys.readouterr()
    warnings = [line for line in out.err.splitlines() if line.startswith("blockdraft: ")]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"blockdraft: warning: {data} is not the file the ONNX export was built with"), out.err
    assert "exporting the model to ONNX again" in warnings[0]
    assert json.loads(out.out)["tokens"] == want
    assert os.path.getsize(data) == len(raw)
