"""The oracle room: trace once, simulate many (docs/definitions.md sec. 5-7).

A :class:`Trace` holds one teacher-forced pass per example (greedy ids, every head's top-K
log-probs and entropy per position); :func:`simulate` walks BPD with exact verification over
it for any drafting strategy and gives the block efficiency ``B``; the analyses compute the
oracle curve, head entropies, draft repetition and wins/ties/losses.

Public surface (details in each module):
    Trace.open(path) / trace[i] -> TraceExample / TraceWriter(path, h=, K=, V=)    (trace)
    synthetic_trace(path, ...) -> Trace                                             (trace)
    simulate(trace, strategy) -> SimulationResult                                   (simulate)
    simulate_at_positions(trace, strategy, example, t) -> StepRecords               (simulate)
    tree_accept_length(tree, greedy_ids, t) -> (n, node)   token trees (sec. 11)    (simulate)
    rank_accuracies(trace, k) -> [h - 1, k]   input of Medusa's calibrated tree  (calibration)
    fit_acceptance(trace, k, lm) -> AcceptanceTables   the cost-aware tree's rates (calibration)
    Oracle(k), accept_lengths, oracle_accept_lengths                                (acceptance)
    StepRecords, SimulationResult                                                   (results)
    repetition, head_entropy, h_max, wins_ties_losses, compare_steps, oracle_curve  (analysis)
    plot_oracle_curve, plot_entropy_densities                                       (plots)
    OracleError, TraceFormatError                                                   (errors)
"""

from blockdraft.oracle.acceptance import Oracle, accept_lengths, oracle_accept_lengths
from blockdraft.oracle.analysis import (
    EntropyStats,
    OracleCurve,
    RepetitionStats,
    WinTieLoss,
    compare_steps,
    h_max,
    has_repetition,
    head_entropy,
    max_runs,
    oracle_curve,
    repetition,
    wins_ties_losses,
)
from blockdraft.oracle.calibration import fit_acceptance, rank_accuracies
from blockdraft.oracle.errors import OracleError, TraceFormatError
from blockdraft.oracle.plots import plot_entropy_densities, plot_oracle_curve
from blockdraft.oracle.results import SimulationResult, StepRecords
from blockdraft.oracle.simulate import (
    TraceMismatchWarning,
    simulate,
    simulate_at_positions,
    tree_accept_length,
)
from blockdraft.oracle.trace import Trace, TraceExample, TraceWriter, synthetic_trace

__all__ = [
    "EntropyStats",
    "Oracle",
    "OracleCurve",
    "OracleError",
    "RepetitionStats",
    "SimulationResult",
    "StepRecords",
    "Trace",
    "TraceExample",
    "TraceFormatError",
    "TraceMismatchWarning",
    "TraceWriter",
    "WinTieLoss",
    "accept_lengths",
    "fit_acceptance",
    "compare_steps",
    "h_max",
    "has_repetition",
    "head_entropy",
    "max_runs",
    "oracle_accept_lengths",
    "oracle_curve",
    "plot_entropy_densities",
    "plot_oracle_curve",
    "rank_accuracies",
    "repetition",
    "simulate",
    "simulate_at_positions",
    "synthetic_trace",
    "tree_accept_length",
    "wins_ties_losses",
]
