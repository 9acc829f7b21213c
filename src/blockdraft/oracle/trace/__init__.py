"""Traces: one teacher-forced pass per example, stored for offline simulation
(docs/definitions.md sec. 6).

With exact verification the committed text is always the greedy reference ``y``, and the head
logits at position ``t`` depend only on ``x, y_<=t``. A trace stores, per example, the prompt
``x``, the greedy ids ``y_1 .. y_m`` and, for every generated position ``t = 0 .. m-1``, each
head's top-``K`` ids and natural-log probabilities and its full-vocabulary entropy. Position
``t = 0`` is the prompt's last token (the last committed token after the prefill); head ``i``
(1-based) at position ``t`` predicts ``y_{t+i}``, so head 1's top-1 at ``t`` is ``y_{t+1}``
(unless the teacher-forced pass and the greedy run disagree on a numerical tie).

Public surface (one concept per module):
    TraceWriter(path, *, h, K, V, signature=None, overwrite=False)                   (writer)
        a context manager writing a trace directory example by example; memory stays bounded
        by one example. ``.add(...)`` stores top-K arrays, ``.add_logits(...)`` full logits.
    Trace.open(path, *, check_values=True) -> Trace                                  (reader)
        open and validate a trace directory; arrays are memory-mapped, never loaded whole.
    Trace.from_head_logits(path, examples, *, K, signature=None, overwrite=False) -> Trace
        write a trace from ``(prompt_ids, greedy_ids, head_logits [m, h, V])`` triples.
    len(trace), trace[i] -> TraceExample, iter(trace)
    TraceExample.lattice(t, k, certain_first=True) -> SausageLattice   the step's lattice
    TraceExample.context(t) -> int64 [len(prompt) + t]                 prompt + y_1..y_t
    synthetic_trace(path, *, ...) -> Trace  a random trace with controlled head accuracy (synthetic)
    head_entropy_from_logits(logits) -> float64 [...]                               (entropy)
    FORMAT_NAME, FORMAT_VERSION, SUPPORTED_VERSIONS, META_FILE   the on-disk format (format)
    OracleError, TraceFormatError   this room's errors, also ValueError  (blockdraft.oracle.errors)

The on-disk format (a directory of ``meta.json`` and seven ``.npy`` files) is described in
:mod:`blockdraft.oracle.trace.format`.
"""

from blockdraft.oracle.errors import OracleError, TraceFormatError
from blockdraft.oracle.trace.entropy import head_entropy_from_logits
from blockdraft.oracle.trace.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    META_FILE,
    SUPPORTED_VERSIONS,
)
from blockdraft.oracle.trace.reader import Trace, TraceExample
from blockdraft.oracle.trace.synthetic import synthetic_trace
from blockdraft.oracle.trace.writer import TraceWriter

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "META_FILE",
    "SUPPORTED_VERSIONS",
    "OracleError",
    "Trace",
    "TraceExample",
    "TraceFormatError",
    "TraceWriter",
    "head_entropy_from_logits",
    "synthetic_trace",
]
