"""Every command line of the README runs (issue 28, finding 6: documented int8 paths failed).

The README's ``blockdraft ...`` lines (in its code blocks, continuation lines joined, comments
dropped) are read with their optional parts: ``[--opt VALUE]`` may be left out, ``[a | b]``
offers alternatives. Every form (none of the optional parts, all of them, each alternative)
must parse with the command line's own parser. Each line then runs on tiny stand-ins (a tiny
Hugging Face model with Medusa heads for ``smollm2``/``PATH``, a tiny BlockwiseLM for
``runs/small``, a miniature shared-data folder, ...), in README order, so the files one line
writes are what the next lines read; a line that would be slow here (a real training run, the
benchmarks), or one that reads what such a line would have written, is run with ``--help``
instead; the benchmark scripts (``python -m benchmarks.NAME``, run from the repository root)
must have every option a line gives them in their help, and a line that runs one as a file
(``python benchmarks/NAME.py``) fails. A README line of a command this test does not know
fails it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from test_cli_hf import TEXT  # noqa: E402
from test_cli_int8 import tiny_chat_llama  # noqa: E402
from test_output_probe import _shared_data  # noqa: E402

from blockdraft.cli import main  # noqa: E402
from blockdraft.cli.parser import build_parser  # noqa: E402
from blockdraft.lattice.io import save_lattice

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

SLOW = {  # commands run with --help: why they would be slow or need what is not here
    "train": "trains a real model (minutes to an hour)",
    "bench rescore": "a latency benchmark over hundreds of lattices",
    "heads questions": "the base writes questions",
    "heads follow-ups": "needs a distillation set of mix.jsonl",
    "heads train": "distils SmolLM2 and trains heads",
    "heads distill": "distils SmolLM2",
    "heads label": "labels a distillation set with SmolLM2 (tests/cli/test_cli_heads.py labels "
    "a tiny one)",
    "heads archive": "needs a distillation set (tests/cli/test_cli_heads.py archives a tiny one)",
    "heads restore": "rebuilds a set with SmolLM2 (tests/cli/test_cli_heads.py restores a tiny "
    "one)",
    "heads curve": "needs trained heads and their set",
    "heads package": "needs a distillation set (the probe test packages tiny heads)",
    "ngram interpolate": "needs two ARPA files (tests/training/ngram/test_ngram_interpolate.py)",
}
SKIP = {  # optional parts left out of the run (they still parse), and why
    "[--dtype bfloat16]": "bfloat16 is lossless only up to rounding (docs/real-models.md)",
    "[--lm lm4-smollm2.bin]": "made by a later line",
    "[--distilled DISTILL_DIR]": "needs a distillation set (heads distill runs --help here)",
    "[--ray]": "starts a local Ray (tests/oracle/test_sweep.py runs sweeps on one)",
    "[--cost curve.json]": "a curve of benchmarks/results/costs (tests/cli/test_cli_sweep.py "
    "reads one)",
}
RUNS = {"ngram train", "rescore", "lattice draw", "trace", "decode", "heads prompts", "oracle",
        "repetition", "entropy", "sweep", "demo", "doctor"}


@dataclass(frozen=True)
class Line:
    """One README command line: its tokens with the optional groups marked."""

    number: int
    text: str
    parts: tuple[Any, ...]  # a token, or a group: a tuple of alternatives (token tuples)

    def form(self, choose: Any) -> list[str]:
        """The tokens with ``choose(index, group)`` -> the alternative (None: left out)."""
        out: list[str] = []
        groups = 0
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            picked = choose(groups, part)
            groups += 1
            if picked is not None:
                out += list(part[picked])
        return out

    @property
    def groups(self) -> list[tuple[tuple[str, ...], ...]]:
        return [p for p in self.parts if not isinstance(p, str)]

    def forms(self) -> list[list[str]]:
        """None of the optional parts, all of them (first alternatives), each alternative."""
        forms = [self.form(lambda i, g: None), self.form(lambda i, g: 0)]
        for k, group in enumerate(self.groups):
            for alt in range(1, len(group)):
                forms.append(self.form(lambda i, g, k=k, alt=alt: alt if i == k else 0))
        return forms


def _group_text(group: tuple[tuple[str, ...], ...]) -> str:
    return "[" + " | ".join(" ".join(alt) for alt in group) + "]"


def _parse(tokens: list[str]) -> tuple[Any, ...]:
    parts: list[Any] = []
    group: list[list[str]] | None = None
    for token in tokens:
        if group is None and token.startswith("["):
            group, token = [[]], token[1:]
        if group is None:
            parts.append(token)
            continue
        closing = token.endswith("]")
        token = token[:-1] if closing else token
        if token == "|":
            group.append([])
        elif token:
            group[-1].append(token)
        if closing:
            parts.append(tuple(tuple(alt) for alt in group))
            group = None
    assert group is None, tokens
    return tuple(parts)


def readme_lines() -> list[Line]:
    """The README's command lines (``blockdraft ...`` and ``python -m benchmarks.NAME ...``, or
    the old ``python benchmarks/NAME.py ...``) inside its code blocks (fenced, or indented by 4
    spaces)."""
    lines = README.read_text(encoding="utf-8").splitlines()
    out: list[Line] = []
    fenced = False
    i = 0
    while i < len(lines):
        raw = lines[i]
        if raw.lstrip().startswith("```"):
            fenced = not fenced
            i += 1
            continue
        text = raw.strip()
        code = fenced or raw.startswith("    ")
        if code and (text.startswith("blockdraft ")
                     or re.match(r"\S*python (-m benchmarks\.|benchmarks/)", text)):
            start = i
            while text.endswith("\\"):
                i += 1
                text = text[:-1] + " " + lines[i].strip()
            out.append(Line(start + 1, text, _parse(shlex.split(text, comments=True))))
        i += 1
    return out


def test_the_readme_has_command_lines() -> None:
    names = {_command(line.form(lambda i, g: None))[0] for line in readme_lines()}
    assert {"decode", "demo", "heads prompts", "ngram train"} <= names


def _command(argv: list[str]) -> tuple[str, list[str]]:
    """(``"heads train"``, the arguments after it) of ``blockdraft heads train ...``."""
    words = argv[1:]
    name = words[0]
    if name in ("heads", "ngram", "bench", "lattice"):
        return f"{name} {words[1]}", words[2:]
    return name, words[1:]


@pytest.mark.parametrize("line", [ln for ln in readme_lines() if ln.text.startswith("blockdraft")],
                         ids=lambda ln: f"README:{ln.number}")
def test_every_form_parses(line: Line) -> None:
    name, _ = _command(line.form(lambda i, g: None))
    assert name in RUNS or name in SLOW, f"README:{line.number} {name}: run it or --help it here"
    for form in line.forms():
        try:
            build_parser().parse_args(form[1:])
        except SystemExit as e:
            raise AssertionError(f"README:{line.number}: {shlex.join(form)} does not parse "
                                 f"(exit {e.code})") from None


@pytest.mark.parametrize("line", [ln for ln in readme_lines()
                                  if not ln.text.startswith("blockdraft")],
                         ids=lambda ln: f"README:{ln.number}")
def test_benchmark_lines_name_options_their_scripts_have(line: Line) -> None:
    tokens = line.form(lambda i, g: 0)
    assert tokens[1] == "-m" and tokens[2].startswith("benchmarks."), (
        f"README:{line.number}: {shlex.join(tokens[:2])}: run a benchmark as a module from the "
        "repository root (python -m benchmarks.NAME); as a file it does not import")
    script = tokens[2]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", script, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    options = [t for t in tokens if t.startswith("--")]
    missing = [o for o in options if o not in done.stdout]
    assert not missing, f"README:{line.number}: {script} has no {missing}"


# ------------------------------------------------------------------------------ the runs


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """What the README's names stand for here: README name -> a path or value."""
    from blockdraft.lattice import SausageLattice

    root = tmp_path_factory.mktemp("readme")
    old_cache = os.environ.get("BLOCKDRAFT_CACHE")
    os.environ["BLOCKDRAFT_CACHE"] = str(root / "cache")
    model, heads = tiny_chat_llama(root)
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(TEXT * 3) + "\n", encoding="utf-8")
    small = root / "runs" / "small"
    assert main(["train", "--corpus", str(corpus), "-o", str(small), "--preset", "tiny",
                 "--steps", "2", "--batch-size", "2", "--seq-len", "16", "--vocab-size",
                 "300", "--eval-fraction", "0.2", "--threads", "1", "--json"]) == 0
    (root / "prompts.txt").write_text("Python lists keep\nThe moon goes\n")
    rng = np.random.default_rng(0)
    save_lattice(SausageLattice.from_logits(rng.standard_normal((4, 300)), k=4),
                 root / "lattice.json")
    (root / "ids.txt").write_text("\n".join(" ".join(str(x) for x in rng.integers(0, 300, 12))
                                            for _ in range(30)) + "\n")
    names = {name: str(root / name) for name in (
        "corpus.txt", "lm4", "lm4.bin", "lm4.arpa", "lattice.json", "lattice.png", "ids.txt",
        "prompts.txt", "lm4-smollm2", "lm4-smollm2.bin", "mix.jsonl", "oracle.png",
        "entropy.png")}
    names.update({
        "tok.json": str(small / "tokenizer.json"), "runs/small": str(small),
        "trace/": str(root / "trace"), "lm2.bin": str(root / "lm4.bin"),
        "smollm2": str(model), "PATH": str(model), "DIR": str(heads),
        "FILE": str(corpus), "...": "Python lists keep their items in order. Python lists",
        "../shared/data": str(_shared_data(root))})
    names["--heads-of-smollm2"] = str(heads)
    yield names
    if old_cache is None:
        os.environ.pop("BLOCKDRAFT_CACHE", None)
    else:
        os.environ["BLOCKDRAFT_CACHE"] = old_cache


def _stand_ins(tokens: list[str], world: dict[str, str]) -> list[str]:
    out = [world.get(t, t) for t in tokens]
    if "--model" in tokens and tokens[tokens.index("--model") + 1] == "smollm2" \
            and "--heads" not in tokens:  # smollm2 brings its packaged heads
        out += ["--heads", world["--heads-of-smollm2"]]
    return out


def _runs(line: Line) -> list[list[str]]:
    """The forms of ``line`` this test runs: every optional part but those of SKIP, each
    alternative of a group of several."""
    def base(i: int, group: Any) -> int | None:
        return None if _group_text(group) in SKIP else 0

    forms = [line.form(base)]
    for k, group in enumerate(line.groups):
        for alt in range(1, len(group)):
            forms.append(line.form(lambda i, g, k=k, alt=alt: alt if i == k else base(i, g)))
    return forms


def test_every_line_runs_in_readme_order(world: dict[str, str], tmp_path: Path, capsys: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    unmade: set[str] = set()  # what the lines run with --help would have written
    for n, line in enumerate(ln for ln in readme_lines() if ln.text.startswith("blockdraft")):
        for k, form in enumerate(_runs(line)):
            name, _ = _command(form)
            slow = name in SLOW or (name == "demo" and "--blockwise" in form)
            if slow and "-o" in form and form[form.index("-o") + 1] not in world:
                unmade.add(form[form.index("-o") + 1])  # (the world has runs/small)
            if slow or unmade & set(form):
                argv = [*name.split(), "--help"]
                with pytest.raises(SystemExit) as e:
                    main(argv)
                assert e.value.code == 0, f"README:{line.number}"
                capsys.readouterr()
                continue
            argv = _stand_ins(form, world)[1:]
            cwd = tmp_path / f"run-{n}-{k}"  # outputs at default paths (demo-output) apart
            cwd.mkdir()
            monkeypatch.chdir(cwd)
            code = main(argv)
            err = capsys.readouterr().err
            assert code == 0, f"README:{line.number}: {shlex.join(form)}\n{err[-3000:]}"
            ran.append(shlex.join(form))
    assert any("--precision int8" in r and "--lookup" in r for r in ran)  # as filed
    assert any(r.startswith("blockdraft demo") and "int8" in r for r in ran)
