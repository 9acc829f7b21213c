"""ONNX export of the rescoring LM with an explicit key/value cache, and its ONNX Runtime runner.

Public surface:
    export_rescorer_onnx(model, path, opset=17, force=False) -> Path
        write (or reuse) ``path``: the :class:`~blockdraft.models.RescorerLM` as an ONNX graph
        whose cache is an input and an output (see :class:`KVStepGraph`)
    export_rescorer_bytes(model, opset=17) -> bytes     the same, in memory (no file)
    OnnxStepRunner(path_or_bytes, device="cpu", intra_op_threads=1, max_seq_len=None)
        .run(input_ids, past_keys, past_values) -> (logits, present_keys, present_values)
    KVStepGraph(model)                 the exported nn.Module (one cached forward)
    onnx_fingerprint(model) -> str     the weights' SHA-256 stamped into every exported file
    read_fingerprint(path) -> str | None

The graph (one call = one incremental forward, like ``RescorerLM.logits(ids, past)``):

    inputs   input_ids     int64   [B, T]
             past_keys     float32 [L, B, n_head, T_past, head_dim]   (T_past may be 0)
             past_values   float32 [L, B, n_head, T_past, head_dim]
    outputs  logits        float32 [B, T, V]                          raw; log_softmax -> nats
             present_keys  float32 [L, B, n_head, T_past + T, head_dim]
             present_values float32 [L, B, n_head, T_past + T, head_dim]

``B``, ``T`` and ``T_past`` are dynamic axes. Position ids are ``T_past .. T_past + T - 1``,
read from ``past_keys``' shape inside the graph, so RoPE continues from the cache exactly as
in torch; the first call passes an empty cache (``T_past = 0``). The cache carries no padding
mask: every position is a real token (left-padded batches are not supported, nor needed by the
rescorer). ``T_past + T`` must not exceed the model's ``max_seq_len`` (the RoPE tables are
baked into the graph with that many rows); :class:`OnnxStepRunner` checks it.

The export uses the TorchScript exporter (``torch.onnx.export(..., dynamo=False)``): it traces
the model's own blocks (the same ``Block.forward`` and SDPA as torch) with example sizes >= 2
on every dynamic axis, keeps the shape arithmetic symbolic, is silent and takes well under a
second for the presets. The dynamo exporter (``dynamo=True`` with ``dynamic_shapes``) also
gives a working graph for :class:`KVStepGraph` under torch 2.13 (checked at ``T_past = 0`` and
``B = T = 1``), but prints progress and is slower; the TorchScript exporter is deprecated since
torch 2.9, so switch to dynamo there if it is removed. onnx and onnxruntime import lazily.
"""

from __future__ import annotations

import hashlib
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from blockdraft.models.blockwise import RescorerLM
from blockdraft.rescorers.base import RescorerError

ONNX_FILE = "rescorer.onnx"
"""File name of the exported graph inside a model directory."""

DEFAULT_OPSET = 17
INPUT_NAMES = ("input_ids", "past_keys", "past_values")
OUTPUT_NAMES = ("logits", "present_keys", "present_values")
_FINGERPRINT_KEY = "blockdraft_fingerprint"
_INSTALL_HINT = "pip install onnxruntime onnx (or: pip install blockdraft, which requires them)"


def onnx_fingerprint(model: RescorerLM) -> str:
    """Hex SHA-256 of the model's config and weights (stamped into the exported file's
    metadata, so a stale export of other weights is detected and redone)."""
    digest = hashlib.sha256(repr(sorted(model.config.to_dict().items())).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


class KVStepGraph(nn.Module):
    """The exported computation: one incremental forward of a :class:`RescorerLM` with a
    stacked key/value cache (shapes in the module docstring).

    It calls the model's own embedding, blocks, final norm and projection; only the position
    ids and the causal mask (query ``q`` sees keys ``0 .. T_past + q``) are rebuilt here from
    the cache's shape, as :meth:`~blockdraft.models.BlockwiseLM.hidden` builds them.
    """

    def __init__(self, model: RescorerLM) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, past_keys: torch.Tensor, past_values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``input_ids [B, T]``, ``past_* [L, B, nh, T_past, hs]`` -> ``(logits [B, T, V],
        present_* [L, B, nh, T_past + T, hs])``."""
        model = self.model
        t_new = input_ids.shape[1]
        t_past = past_keys.shape[3]
        positions = torch.arange(t_new, device=input_ids.device) + t_past  # (T,)
        key_pos = torch.arange(t_past + t_new, device=input_ids.device)  # (T_past + T,)
        mask = key_pos[None, :] <= positions[:, None]  # (T, T_past + T), True = may attend
        cos = model.rope_cos[positions][None, None]  # (1, 1, T, hs/2)
        sin = model.rope_sin[positions][None, None]  # (1, 1, T, hs/2)
        x = model.transformer.wte(input_ids)  # (B, T, d)
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        for i, block in enumerate(model.transformer.blocks):
            x, k, v = block(x, cos, sin, past_keys[i], past_values[i], mask, False)
            keys.append(k)  # (B, nh, T_past + T, hs)
            values.append(v)
        x = model.transformer.ln_f(x)  # (B, T, d)
        logits = model.project(x)  # (B, T, V)
        return logits, torch.stack(keys), torch.stack(values)  # (L, B, nh, T_past + T, hs)


def _export_bytes(model: RescorerLM, opset: int) -> bytes:
    """The ONNX model of :class:`KVStepGraph` over ``model`` (a CPU copy), as bytes."""
    cfg = model.config
    cpu_model = RescorerLM(cfg, device="cpu")
    cpu_model.load_state_dict({k: v.detach().cpu() for k, v in model.state_dict().items()})
    graph = KVStepGraph(cpu_model.eval()).eval()
    # Example sizes >= 2 on every dynamic axis, so the tracer cannot confuse them.
    b, t, t_past = 2, 3, 2
    ids = torch.zeros(b, t, dtype=torch.long)
    past = torch.zeros(cfg.n_layer, b, cfg.n_head, t_past, cfg.head_dim)
    dims = {"input_ids": {0: "batch", 1: "new"},
            "past_keys": {1: "batch", 3: "past"}, "past_values": {1: "batch", 3: "past"},
            "logits": {0: "batch", 1: "new"},
            "present_keys": {1: "batch", 3: "total"}, "present_values": {1: "batch", 3: "total"}}
    with tempfile.TemporaryDirectory(prefix="blockdraft-onnx-") as tmp:
        out = Path(tmp) / ONNX_FILE
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notes
            with torch.no_grad():
                torch.onnx.export(
                    graph, (ids, past, past.clone()), out, dynamo=False,
                    input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
                    dynamic_axes=dims, opset_version=opset, do_constant_folding=True,
                )
        return out.read_bytes()


def _stamp(data: bytes, fingerprint: str) -> bytes:
    import onnx

    proto = onnx.load_from_string(data)
    entry = proto.metadata_props.add()
    entry.key, entry.value = _FINGERPRINT_KEY, fingerprint
    return proto.SerializeToString()  # type: ignore[no-any-return]


def read_fingerprint(path: str | Path) -> str | None:
    """The fingerprint stamped into an exported file, or None (missing, unreadable, unstamped)."""
    try:
        import onnx

        proto = onnx.load(str(path), load_external_data=False)
    except ImportError as e:
        raise RescorerError(f"the ONNX backend needs the onnx package: {_INSTALL_HINT}") from e
    except Exception:  # noqa: BLE001 - any unreadable file is simply re-exported
        return None
    for entry in proto.metadata_props:
        if entry.key == _FINGERPRINT_KEY:
            return str(entry.value)
    return None


def export_rescorer_onnx(
    model: RescorerLM,
    path: str | Path,
    opset: int = DEFAULT_OPSET,
    force: bool = False,
) -> Path:
    """Export ``model`` to ONNX with key/value-cache inputs and outputs (module docstring).

    Args:
        model: the rescoring LM (``h = 1``).
        path: the ``.onnx`` file to write, or a directory (then ``directory/rescorer.onnx``;
            a model directory of :func:`~blockdraft.models.save_model` is the natural place).
        opset: ONNX opset version (>= 14, which the exporter needs for SDPA).
        force: export even when ``path`` already holds an export of the same weights.

    Returns:
        The file written, or reused when it already holds an export of the same weights and
        opset (its stamp, :func:`onnx_fingerprint` and the opset, matches).

    Raises:
        RescorerError: when ``model`` is not a RescorerLM, onnx is not installed, the export
            fails, or ``path`` cannot be written.
    """
    _check_export(model, opset)
    target = Path(path)
    if target.is_dir() or (not target.suffix and not target.exists()):
        target = target / ONNX_FILE
    stamp = f"{onnx_fingerprint(model)}/opset{opset}"
    if target.is_file() and not force and read_fingerprint(target) == stamp:
        return target
    data = export_rescorer_bytes(model, opset, stamp)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
    except OSError as e:
        raise RescorerError(
            f"cannot write the ONNX export to {target}: {e}; pass a writable onnx_path"
        ) from e
    return target


def export_rescorer_bytes(
    model: RescorerLM, opset: int = DEFAULT_OPSET, fingerprint: str | None = None
) -> bytes:
    """The serialized ONNX model of :func:`export_rescorer_onnx`, in memory (no file).

    ``fingerprint`` is the stamp to write into its metadata (default: the weights' SHA-256
    and the opset).

    Raises:
        RescorerError: when ``model`` is not a RescorerLM, a bad opset, onnx is missing or
            the export fails.
    """
    _check_export(model, opset)
    try:
        import onnx  # noqa: F401 - the exporter needs it; fail early with the hint
    except ImportError as e:
        raise RescorerError(f"the ONNX backend needs the onnx package: {_INSTALL_HINT}") from e
    try:
        data = _export_bytes(model, opset)
    except Exception as e:  # noqa: BLE001 - the exporter raises many kinds; chain them
        raise RescorerError(f"exporting the rescorer to ONNX failed: {e}") from e
    return _stamp(data, fingerprint or f"{onnx_fingerprint(model)}/opset{opset}")


def _check_export(model: object, opset: object) -> None:
    if not isinstance(model, RescorerLM):
        raise RescorerError(
            f"the ONNX export expects a RescorerLM (h = 1), got {type(model).__name__}"
        )
    if isinstance(opset, bool) or not isinstance(opset, int) or opset < 14:
        raise RescorerError(f"opset must be an integer >= 14, got {opset!r}")


class OnnxStepRunner:
    """An ONNX Runtime session over an exported rescorer graph.

    Args:
        model: the exported file (path) or its bytes.
        device: ``"cpu"``, or ``"cuda"``/``"cuda:N"`` for the CUDA execution provider when
            onnxruntime has it (else a RescorerError). Inputs and outputs are numpy arrays on
            the host either way (no I/O binding).
        intra_op_threads: ONNX Runtime's intra-op thread count (0: its default, all cores).
        max_seq_len: the model's ``max_seq_len`` (checked before every run).

    Raises:
        RescorerError: when onnxruntime is missing, the device is unavailable, or the file
            cannot be loaded.
    """

    def __init__(
        self,
        model: str | Path | bytes,
        device: str = "cpu",
        intra_op_threads: int = 1,
        max_seq_len: int | None = None,
    ) -> None:
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise RescorerError(
                f"the ONNX backend needs onnxruntime: {_INSTALL_HINT}"
            ) from e
        if not isinstance(intra_op_threads, int) or intra_op_threads < 0:
            raise RescorerError(
                f"intra_op_threads must be an integer >= 0, got {intra_op_threads!r}"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        providers: list[Any]
        dev = torch.device(device)
        if dev.type == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise RescorerError(
                    f"device {device!r} asks for ONNX Runtime's CUDAExecutionProvider, but this "
                    f"onnxruntime has only {ort.get_available_providers()}; install "
                    "onnxruntime-gpu or use device='cpu'"
                )
            providers = [("CUDAExecutionProvider", {"device_id": dev.index or 0}),
                         "CPUExecutionProvider"]
        elif dev.type == "cpu":
            providers = ["CPUExecutionProvider"]
        else:
            raise RescorerError(f"the onnx backend runs on 'cpu' or 'cuda', got {device!r}")
        source = model if isinstance(model, bytes) else str(model)
        try:
            self.session = ort.InferenceSession(source, options, providers=providers)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            where = "<bytes>" if isinstance(model, bytes) else str(model)
            raise RescorerError(
                f"onnxruntime cannot load {where}: {e}; re-export it with export_rescorer_onnx"
            ) from e
        self.max_seq_len = max_seq_len

    @property
    def providers(self) -> list[str]:
        """The execution providers the session uses, preferred first."""
        return list(self.session.get_providers())

    def run(
        self, input_ids: np.ndarray, past_keys: np.ndarray, past_values: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One incremental forward.

        Args:
            input_ids: int64 ``[B, T]``.
            past_keys, past_values: float32 ``[L, B, nh, T_past, hs]`` (``T_past`` may be 0).

        Returns:
            ``logits`` float32 ``[B, T, V]`` (raw), ``present_keys`` and ``present_values``
            float32 ``[L, B, nh, T_past + T, hs]``.

        Raises:
            RescorerError: when ``T_past + T`` exceeds ``max_seq_len``.
        """
        total = past_keys.shape[3] + input_ids.shape[1]
        if self.max_seq_len is not None and total > self.max_seq_len:
            raise RescorerError(
                f"{past_keys.shape[3]} cached + {input_ids.shape[1]} new positions exceed the "
                f"model's max_seq_len = {self.max_seq_len}"
            )
        logits, keys, values = self.session.run(list(OUTPUT_NAMES), {
            "input_ids": np.ascontiguousarray(input_ids, dtype=np.int64),
            "past_keys": np.ascontiguousarray(past_keys, dtype=np.float32),
            "past_values": np.ascontiguousarray(past_values, dtype=np.float32),
        })
        return logits, keys, values
