"""The demo's measurements: greedy decoding of the held-out prompts (the reference), then
every drafting strategy decoded online (each output checked against greedy decoding token
for token) and simulated offline over the trace, and the oracle.

A strategy is ``(label, k, p, rescorer, settings)``: the table's label, the lattice width,
the drafts verified per call, the rescorer (None: the heads' own scores) and the row's own
part of the signature.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from blockdraft.core.efficiency import block_efficiency
from blockdraft.demo.config import DEMO_K, DEMO_P, NEURAL_ALPHA, NGRAM_ALPHA
from blockdraft.demo.errors import DemoError
from blockdraft.demo.results import DemoRow

Strategy = tuple[str, int, int, Any, str]


def strategies(neural: Any, ngram: Any, order: int) -> list[Strategy]:
    """Vanilla BPD, neural rescoring, p-best 0-gram, n-gram rescoring and p-best n-gram."""
    return [
        ("vanilla BPD", 1, 1, None, "k:1|p:1|alpha:0|lm:none"),
        ("neural rescoring", DEMO_K, 1, neural,
         f"k:{DEMO_K}|p:1|alpha:{NEURAL_ALPHA}|lm:rescorer(onnx)"),
        (f"{DEMO_P}-best 0-gram", DEMO_K, DEMO_P, None,
         f"k:{DEMO_K}|p:{DEMO_P}|alpha:0|lm:none"),
        (f"{order}-gram rescoring", DEMO_K, 1, ngram,
         f"k:{DEMO_K}|p:1|alpha:{NGRAM_ALPHA}|lm:{order}-gram"),
        (f"{DEMO_P}-best {order}-gram", DEMO_K, DEMO_P, ngram,
         f"k:{DEMO_K}|p:{DEMO_P}|alpha:{NGRAM_ALPHA}|lm:{order}-gram"),
    ]


def greedy_references(model: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                      eos: int | None) -> tuple[list[list[int]], float]:
    """Plain greedy decoding of every prompt, and its wall seconds."""
    from blockdraft.models import greedy_generate

    greedy: list[list[int]] = []
    t0 = time.perf_counter()
    for prompt in prompts:
        greedy.append(greedy_generate(model, prompt, max_new_tokens, eos_id=eos))
    return greedy, time.perf_counter() - t0


def measure(
    model: Any,
    prompts: Sequence[Sequence[int]],
    greedy: Sequence[list[int]],
    greedy_s: float,
    trace: Any,
    plan: Sequence[Strategy],
    shared: dict[str, Any],
    max_new_tokens: int,
    eos: int | None,
    log: Callable[[str], None],
) -> tuple[list[DemoRow], float]:
    """One row per strategy (online ``B``, offline ``B``, wall time), then the oracle's row;
    and the % of consecutive repeats in the vanilla drafts.

    Raises:
        DemoError: when a lossless decode differs from greedy decoding.
    """
    from blockdraft.core.signature import format_signature
    from blockdraft.drafts import DraftSpec
    from blockdraft.oracle import Oracle, repetition, simulate
    from blockdraft.verify import decode

    rows: list[DemoRow] = []
    base_b: float | None = None
    vanilla_rep = math.nan
    for label, k, p, rescorer, settings in plan:
        log(f"decoding with {label}")
        calls = tokens = 0
        wall = 0.0
        spec = DraftSpec("heads", k=k, p=p, rescorer="" if rescorer is None else "given",
                         given=rescorer)
        for i, prompt in enumerate(prompts):
            res = decode(model, prompt, drafter=spec, criterion="exact",
                         max_new_tokens=max_new_tokens, eos_id=eos)
            if res.tokens != greedy[i]:
                raise DemoError(
                    f"{label}: the lossless decode of prompt {i} differs from greedy "
                    f"decoding at token {first_difference(res.tokens, greedy[i])} (a bug: "
                    "report it)"
                )
            calls += res.calls
            tokens += len(res.tokens)
            wall += res.wall_s
        b = block_efficiency(tokens, calls)
        offline = simulate(trace, spec)
        base_b = b if base_b is None else base_b
        rows.append(DemoRow(label, b, b / base_b - 1.0, offline.block_efficiency, wall,
                            greedy_s / wall, settings,
                            format_signature({**shared, **fields(settings)})))
        if label == "vanilla BPD":
            vanilla_rep = repetition(offline).pct_consecutive
    oracle_b = simulate(trace, Oracle(DEMO_K)).block_efficiency
    settings = f"k:{DEMO_K}|p:1|alpha:-|lm:oracle"
    assert base_b is not None
    rows.append(DemoRow(f"oracle (k={DEMO_K})", oracle_b, oracle_b / base_b - 1.0, oracle_b,
                        None, None, settings,
                        format_signature({**shared, **fields(settings)})))
    return rows, float(vanilla_rep)


def fields(settings: str) -> dict[str, str]:
    """``"k:16|p:1"`` -> ``{"k": "16", "p": "1"}``."""
    return dict(part.split(":", 1) for part in settings.split("|"))  # type: ignore[misc]


def first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    """The first index where ``a`` and ``b`` differ (the shorter length when one is a prefix
    of the other)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
