"""The answers archive of a distillation set (training/heads/archive): the answers and the plan
in one sealed file; the set rebuilt from it equals the original shard for shard (answers,
prompts, states up to float rounding), resumes, continues as a distillation set, and refuses
damaged files, other prompts and other folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from heads_testlib import EOS, build, settings, tiny_llama, tiny_prompts  # noqa: E402

from blockdraft.training import TrainingError  # noqa: E402
from blockdraft.training.heads import build_distill_set, hash_prompts  # noqa: E402
from blockdraft.training.heads.archive import (  # noqa: E402
    archive_answers,
    read_archive,
    restore_distill_set,
)
from blockdraft.training.heads.shards import open_distill_set, read_shard  # noqa: E402

PROMPTS = tiny_prompts(36, seed=5)


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A float32 set of 36 prompts in shards of 8, stopped after 3 shards (an unfinished set:
    the archive keeps what is done)."""
    return build(tmp_path_factory.mktemp("orig") / "d", PROMPTS, max_prompts=10)


def test_an_archive_round_trips_and_is_small(original: Any, tmp_path: Path) -> None:
    path = tmp_path / "answers.npz"
    written = archive_answers(original, path)
    back = read_archive(path)
    assert back.digest == written.digest and back.plan == original.plan
    assert [s.name for s in back.shards] == original.done
    assert back.tokens == sum(original.summary()[f"{s}_tokens"] for s in ("train", "heldout"))
    for shard in back.shards:
        orig = read_shard(original.shard_path(shard.name))
        np.testing.assert_array_equal(shard.prompt_index, orig.prompt_index)
        np.testing.assert_array_equal(shard.answer_ids, orig.answer_ids)
    # about 2 bytes an answer token (compressed): no prompts, no states
    assert path.stat().st_size < 4 * back.tokens + 4096


def test_a_restored_set_equals_the_original(original: Any, tmp_path: Path) -> None:
    archive_answers(original, tmp_path / "a.npz")
    archive = read_archive(tmp_path / "a.npz")
    out = restore_distill_set(archive, tiny_llama(), PROMPTS, tmp_path / "r", pad_id=0,
                              batch_size=3, log=None, progress=False)
    assert out.done == original.done and out.plan["shards"] == original.plan["shards"]
    assert out.plan["restored_from"] == archive.digest
    assert out.summary() == original.summary()
    for name in original.done:
        a, b = read_shard(original.shard_path(name)), read_shard(out.shard_path(name))
        for field in ("prompt_index", "prompt_ids", "prompt_offsets", "answer_ids",
                      "answer_offsets"):
            np.testing.assert_array_equal(getattr(b, field), getattr(a, field))
        # the states of one teacher-forced forward: the generation's, up to float rounding
        torch.testing.assert_close(b.hidden, a.hidden, atol=2e-5, rtol=1e-4)


def test_a_restore_resumes_and_the_set_continues_to_be_generated(original: Any,
                                                                 tmp_path: Path) -> None:
    archive_answers(original, tmp_path / "a.npz")
    archive = read_archive(tmp_path / "a.npz")
    folder = tmp_path / "r"
    first = restore_distill_set(archive, tiny_llama(), PROMPTS, folder, log=None,
                                progress=False)
    gone = first.done[-1]
    first.shard_path(gone).unlink()  # as if interrupted before its last shard
    again = restore_distill_set(archive, tiny_llama(), PROMPTS, folder, log=None,
                                progress=False)
    assert again.done == original.done
    # the restored set is a distillation set: the data step goes on from where it stopped
    s = settings(prompts=hash_prompts(PROMPTS))
    more = build_distill_set(tiny_llama(), PROMPTS, folder, s, eos_id=EOS, log=None,
                             progress=False)
    assert more.complete and len(more.done) > len(original.done)


def test_damage_and_mismatch_are_refused(original: Any, tmp_path: Path) -> None:
    path = tmp_path / "a.npz"
    archive_answers(original, path)
    raw = bytearray(path.read_bytes())
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(raw[: len(raw) // 2]))
    with pytest.raises(TrainingError, match="bad.npz.*truncated"):
        read_archive(bad)
    with pytest.raises(TrainingError, match="cannot read the answers archive"):
        read_archive(tmp_path / "missing.npz")
    # an array edited and the file rewritten with the old digest: caught by the digest
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    name = next(k for k in arrays if k.endswith(".answers"))
    arrays[name] = arrays[name].copy()
    arrays[name][0] ^= 1
    edited = tmp_path / "edited.npz"
    np.savez_compressed(edited, **arrays)
    with pytest.raises(TrainingError, match="changed or corrupted"):
        read_archive(edited)
    archive = read_archive(path)
    with pytest.raises(TrainingError, match="not the ones the archived set was made from"):
        restore_distill_set(archive, tiny_llama(), PROMPTS[:-1], tmp_path / "x", log=None,
                            progress=False)
    other = build(tmp_path / "other", tiny_prompts(20, seed=9), max_prompts=4)
    with pytest.raises(TrainingError, match="holds another distillation set"):
        restore_distill_set(archive, tiny_llama(), PROMPTS, other.folder, log=None,
                            progress=False)
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    with pytest.raises(TrainingError):
        restore_distill_set(archive, tiny_llama(), PROMPTS, tmp_path / "user", log=None,
                            progress=False)
    assert open_distill_set(original.folder).done == original.done  # nothing changed
