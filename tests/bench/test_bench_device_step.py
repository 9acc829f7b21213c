"""benchmarks/bench_device_step.py end to end on a tiny random Llama (``--tiny``, CPU): every row
(greedy, vanilla heads and the 16-node Medusa tree, on the host path and with the whole step on
the device; the device drafters: rated trees, lookup, vanilla + lookup) decodes losslessly in
float32, runs in bfloat16, and the report holds each row; with the packaged heads folder the
rated trees read its tables, and the n-gram row needs the LM's ARPA file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from benchmarks import bench_device_step  # noqa: E402


def test_tiny_run_reports_every_row(tmp_path: Path) -> None:
    assert bench_device_step.main(["--tiny", "--dtype", "float32", "--dtype", "bfloat16",
                                   "--prompts", "2", "--max-new-tokens", "12",
                                   "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "device.json").read_text())
    assert "precisions:float32,bfloat16" in report["signature"]
    want = set(bench_device_step.rows_of(3))
    assert {"vanilla heads (device step)", "medusa tree N=16 (device step)",
            "rated tree N=16 (device step)", "lookup (device step)",
            "vanilla + lookup (device step)"} <= want
    for precision in ("float32", "bfloat16"):
        part = report["precisions"][precision]
        assert set(part["rows"]) == want
        for name, row in part["rows"].items():
            assert row["B"] >= 1.0 and row["tokens"] == 24
            if precision == "float32":
                assert row["identical"] == 2, name
            if name.endswith(bench_device_step.DEVICE):
                assert row["host_ms"] >= 0 and row["device_ms"] > 0
    assert report["precisions"]["float32"]["rows"]["greedy (graph)"]["speedup"] == 1.0
    assert "| medusa tree N=16 (device step) |" in (tmp_path / "device.md").read_text()


def test_the_rated_rows_read_the_heads_folder(tmp_path: Path) -> None:
    packaged = (Path(__file__).resolve().parents[2] / "src" / "blockdraft" / "models" / "hf"
                / "heads" / "smollm2")
    said: list[str] = []
    rows = bench_device_step.rows_of(4, packaged, said.append)
    spec, on_device = rows["rated tree N=32 (device step)"]
    assert on_device and spec.tables == str(packaged / "acceptance.json")
    assert "medusa tree N=64 (device step)" in rows
    if not (packaged / "ngram" / "answers4.arpa").is_file():
        assert "rated tree N=32 + n-gram (device step)" not in rows
        assert any("answers4.arpa" in m for m in said)
    folder = tmp_path / "heads"
    folder.mkdir()
    (folder / "config.json").write_text('{"blockdraft_drafting": {"ngram": "lm.arpa"}}')
    (folder / "lm.arpa").write_text("")
    spec, _ = bench_device_step.rows_of(3, folder)["rated tree N=32 + n-gram (device step)"]
    assert spec.rescorer == "ngram" and spec.lm.endswith("lm.arpa") and spec.tables == ""
