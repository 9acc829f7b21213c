"""The counting rule of block efficiency ``B`` (docs/definitions.md sec. 2), in one place.

``B = generated tokens / serial calls of the model``, the prompt's prefill counted as a call:
the prefill makes ``y_1`` certain, and each verification call that accepts ``n`` draft tokens
makes ``1 + n`` tokens certain (the accepted ``d_2 .. d_{1+n}`` and the next certain token),
of which only those up to EOS or ``max_new_tokens`` (the end of ``y``) count. So ``1 <= B <= h``
and plain greedy decoding has ``B = 1``. Pooled over examples, ``B`` is the sum of their
tokens over the sum of their calls (not the mean of the examples' ratios).

The online decode loop (:class:`~blockdraft.verify.records.DecodeResult`), the offline
simulator (:class:`~blockdraft.oracle.results.SimulationResult`), the demo and the benchmarks
count with these two functions, and so does the heads' offline chain
(``training/heads/data_curve.chain_block_efficiency``).

Public surface:
    call_tokens(n, remaining) -> int        tokens a call accepting ``n`` makes certain
    block_efficiency(tokens, calls) -> float    ``B``; 0.0 when nothing was called
"""

from __future__ import annotations


def call_tokens(n: int, remaining: int) -> int:
    """Tokens of the output that one verification call makes certain.

    Args:
        n: draft tokens the call accepted beyond the certain ``d_1`` (``0 .. h - 1``).
        remaining: tokens of the output still to come after those already certain (up to
            EOS or ``max_new_tokens``).

    Returns:
        ``min(1 + n, remaining)``.
    """
    return min(1 + int(n), int(remaining))


def block_efficiency(tokens: int, calls: int) -> float:
    """``B = tokens / calls`` (tokens per serial model call, the prefill counted as a call).

    Args:
        tokens: generated tokens, counted up to EOS or ``max_new_tokens``.
        calls: serial calls of the model, the prefill included.

    Returns:
        ``B``, or 0.0 when there was no call (nothing was generated: ``B`` has nothing to
        measure; callers that report it say so).
    """
    return int(tokens) / int(calls) if calls else 0.0
