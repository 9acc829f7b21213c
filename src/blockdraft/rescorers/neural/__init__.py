"""Local neural rescoring (Kim et al. 2024, Algorithm 2) with a small autoregressive LM.

Public surface:
    NeuralRescorer(model, alpha=1.0, backend="torch" | "onnx", device=None, onnx_path=None)
        .rescore(lattice, context, p=1) -> DraftBatch     greedy (p = 1) or beam (p > 1)
    export_rescorer_onnx(model, path) -> Path              the LM's incremental forward as ONNX
    NeuralStats                                            what one call fed the LM
    time_step(rescorer, lattice, context, repeats) -> float   median ms of one decode step
    NeuralPathScorer(model, max_depth=8, bos_id=None)      the LM scoring token-tree paths

The torch backend runs the :class:`~blockdraft.models.RescorerLM` itself; the onnx backend runs
an export of it under ONNX Runtime (imported lazily). One module per concept:

    :mod:`.rescorer`       the rescorer: its key/value cache and its context window
    :mod:`.search`         the search: Kim's greedy pass (p = 1) and the beam (p > 1)
    :mod:`.backends`       the LM behind each backend (torch, ONNX Runtime)
    :mod:`.onnx_graph`     the exported ONNX graph (a fixed-size key/value buffer written in place)
    :mod:`.onnx_export`    exporting it to a file or bytes, reusing an up-to-date file
    :mod:`.onnx_runtime`   running it: ONNX Runtime sessions and the key/value buffers
    :mod:`.timing`         the latency of one decode step
    :mod:`.path_scorer`    scoring the paths of a token tree (the rescored tree's LM)
"""

from blockdraft.rescorers.neural.onnx_export import export_rescorer_onnx
from blockdraft.rescorers.neural.path_scorer import NeuralPathScorer
from blockdraft.rescorers.neural.rescorer import BACKENDS, NeuralRescorer, NeuralStats
from blockdraft.rescorers.neural.timing import time_step

__all__ = [
    "BACKENDS",
    "NeuralPathScorer",
    "NeuralRescorer",
    "NeuralStats",
    "export_rescorer_onnx",
    "time_step",
]
