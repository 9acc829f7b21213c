"""`RuntimeModel`: a loaded model run elsewhere, and `Shared`, what it shares with that model.

A runtime that wraps a loaded :class:`~blockdraft.models.hf.HFBlockwiseModel` (ONNX Runtime,
the static cache) computes the forward and the heads its own way, and shares everything else
with the model it was made from: its sizes (``config``: ``h``, ``max_seq_len``, ...), its
tokenizer, the drafting recipe packaged with its heads, the heads' digest (what a trace
records) and its declared capabilities, changed where the runtime changes them. They are
taken once, into one :class:`Shared` record, and read from it by :class:`RuntimeModel`; no
runtime forwards them one by one.

Public surface:
    Shared            frozen: config, tokenizer, heads_digest, capabilities
        Shared.of(model, config=None, **capabilities) -> Shared
    RuntimeModel(shared, heads_rule)     config, tokenizer, h, max_seq_len, precision, drafting,
                                         heads_digest, capabilities, training, eval(), and the
                                         heads of HeadsLM
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from blockdraft.models.capabilities import Capabilities
from blockdraft.models.heads import HeadsLM, HeadsRule


@dataclass(frozen=True)
class Shared:
    """What a runtime shares with the loaded model it runs (see the module docstring).

    Attributes:
        config: the model's sizes (:class:`~blockdraft.models.hf.HFBlockwiseConfig`; its
            ``dtype`` the runtime's precision).
        tokenizer: the model's tokenizer, or None.
        heads_digest: 16 hex digits of the heads' weights and shortlist.
        capabilities: the model's declared record on this runtime.
    """

    config: Any
    tokenizer: Any
    heads_digest: str
    capabilities: Capabilities

    @classmethod
    def of(cls, model: Any, config: Any = None, **capabilities: Any) -> Shared:
        """What ``model`` shares with a runtime that changes ``capabilities`` of its record
        (``runtime=``, ``precision=``, ...) and, when given, its ``config``."""
        return cls(config=model.config if config is None else config, tokenizer=model.tokenizer,
                   heads_digest=model.heads_digest,
                   capabilities=model.capabilities.with_(**capabilities))


class RuntimeModel(HeadsLM):
    """Base of a runtime that wraps a loaded model: what it shares, read from one record.

    Args:
        shared: what the runtime shares with the model (:class:`Shared`).
        heads_rule: the heads' rule over this runtime's backend.
    """

    runtime: ClassVar[str] = ""

    def __init__(self, shared: Shared, heads_rule: HeadsRule) -> None:
        self.shared = shared
        self.heads_rule = heads_rule

    @property
    def config(self) -> Any:
        """The model's sizes (``h``, ``vocab_size``, ``max_seq_len``, ``dtype``, ...)."""
        return self.shared.config

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer, or None."""
        return self.shared.tokenizer

    @property
    def capabilities(self) -> Capabilities:
        """The model's declared record on this runtime."""
        return self.shared.capabilities

    @property
    def heads_digest(self) -> str:
        """The heads' digest (what a trace records): the wrapped model's."""
        return self.shared.heads_digest

    @property
    def drafting(self) -> Any:
        """The drafting recipe packaged with the heads, or None."""
        return self.shared.capabilities.drafting

    @property
    def precision(self) -> str:
        """What the runtime computes in."""
        return self.shared.capabilities.precision

    @property
    def h(self) -> int:
        """Prediction heads, the base LM (head 1) included."""
        return int(self.shared.config.h)

    @property
    def max_seq_len(self) -> int | None:
        """The longest sequence the model reads (positions)."""
        return self.shared.config.max_seq_len  # type: ignore[no-any-return]

    @property
    def training(self) -> bool:
        """Never: a runtime only decodes."""
        return False

    def eval(self) -> RuntimeModel:
        """No-op (a runtime is always in inference mode)."""
        return self
