"""Local neural rescoring (Kim et al. 2024, Algorithm 2) with a small autoregressive LM.

Public surface:
    NeuralRescorer(model, alpha=1.0, backend="torch" | "onnx", device=None, onnx_path=None)
        .rescore(lattice, context, p=1) -> DraftBatch     greedy (p = 1) or beam (p > 1)
    export_rescorer_onnx(model, path) -> Path              the LM's incremental forward as ONNX
    NeuralStats                                            what one call fed the LM
    time_step(rescorer, lattice, context, repeats) -> float   median ms of one decode step

The torch backend runs the :class:`~blockdraft.models.RescorerLM` itself; the onnx backend runs
an export of it under ONNX Runtime (imported lazily). See :mod:`.rescorer` for the algorithm,
the cache and the context window, :mod:`.onnx_export` for the exported graph (a fixed-size
key/value buffer written in place) and its runner.
"""

from blockdraft.rescorers.neural.onnx_export import export_rescorer_onnx
from blockdraft.rescorers.neural.rescorer import BACKENDS, NeuralRescorer, NeuralStats, time_step

__all__ = ["BACKENDS", "NeuralRescorer", "NeuralStats", "export_rescorer_onnx", "time_step"]
