"""The peers of the real-model benchmark: what a user would run instead, on the same model.

Public surface:
    PeerOutput                    tokens generated, serial model calls (None when unknown)
    Peer                          the interface: name, family, precision, generate(...)
    HFGenerate(base, lookup=None, cache=None, compile=None) transformers' ``generate`` on the
        base model, greedy (``do_sample=False``); ``lookup=10``: prompt lookup decoding
        (``prompt_lookup_num_tokens=10``, transformers' default n-gram size 2); ``cache=
        "static"``: its static cache (``cache_implementation``), ``compile``: with or without
        its automatic ``torch.compile`` of a static-cache decode (``disable_compile``; None:
        transformers' default); ``.close()`` removes its call-counting hook
    LlamaCpp(gguf, threads, lookup=None, n_ctx=2048)   llama.cpp through llama-cpp-python on
        a GGUF file, greedy (``temp=0``); ``lookup=10``: its prompt lookup decoding
        (``LlamaPromptLookupDecoding(num_pred_tokens=10)``, which needs ``logits_all=True``)
    llama_cpp_missing() -> str | None     why llama.cpp cannot run here (None when it can)
    gguf_precision(path) -> str           the quantisation named in a GGUF file's name
    INSTALL_LLAMA_CPP                     the command that installs llama-cpp-python
    peer_name(runtime, lookup) -> str     a peer's name in tables

Every peer decodes one prompt of token ids, batch 1, stops after EOS (included, as
:func:`blockdraft.models.greedy_generate` does) or at ``max_new_tokens``, and counts its serial
model calls where it can (a forward hook on the transformers model; llama.cpp's ``eval``
calls): ``B = tokens / calls`` as for blockdraft (docs/definitions.md sec. 2, the prefill
counted as a call).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

INSTALL_LLAMA_CPP = "make bench-real-peers-setup  (bash scripts/install_llama_cpp.sh)"


def peer_name(runtime: str, lookup: int | None) -> str:
    """A peer's name in tables: ``"<runtime> greedy"`` or ``"<runtime> prompt lookup (n=N)"``
    (``runtime``: ``"HF generate"`` or ``"llama.cpp"``)."""
    return f"{runtime} greedy" if lookup is None else f"{runtime} prompt lookup (n={lookup})"


@dataclass(frozen=True)
class PeerOutput:
    """What one peer call produced.

    Attributes:
        tokens: the generated ids (the prompt excluded; EOS included when it stopped).
        calls: serial forward calls of the model, the prompt's prefill included; None when
            the peer cannot tell.
    """

    tokens: list[int]
    calls: int | None


class Peer(Protocol):
    """A peer: ``name`` (for tables), ``family`` (the name of its own greedy peer, the one
    its output is compared with), ``precision`` (weights and arithmetic, in words)."""

    name: str
    family: str
    precision: str

    def generate(self, prompt: Sequence[int], max_new_tokens: int,
                 eos_id: int | None) -> PeerOutput: ...


class HFGenerate:
    """transformers' ``generate`` on a causal LM, greedy; prompt lookup with ``lookup``.

    A fresh :class:`transformers.GenerationConfig` holds only what is asked (greedy, one
    beam, no repetition penalty, the EOS and ``max_new_tokens``), so a model's own generation
    defaults (sampling temperature, top-p) play no part.
    """

    def __init__(self, base: Any, lookup: int | None = None, cache: str | None = None,
                 compile: bool | None = None) -> None:
        self.base = base
        self.lookup = lookup
        self.cache, self.compile = cache, compile
        self.family = peer_name("HF generate", None)
        self.name = peer_name("HF generate", lookup)
        dtype = str(next(base.parameters()).dtype).removeprefix("torch.")
        self.precision = f"{dtype} (transformers)"
        self._calls = 0
        # no call counting under torch.compile (a hook would be traced into the graph)
        self._hook = None if compile else base.register_forward_pre_hook(self._count)

    def close(self) -> None:
        """Remove the call-counting hook from the model."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _count(self, module: Any, args: Any) -> None:
        self._calls += 1

    def generate(self, prompt: Sequence[int], max_new_tokens: int,
                 eos_id: int | None) -> PeerOutput:
        import torch
        from transformers import GenerationConfig

        device = next(self.base.parameters()).device
        ids = torch.tensor([list(prompt)], dtype=torch.long, device=device)
        pad = eos_id if eos_id is not None else 0
        config = GenerationConfig(
            do_sample=False, num_beams=1, max_new_tokens=max_new_tokens, min_new_tokens=0,
            eos_token_id=eos_id, pad_token_id=pad, repetition_penalty=1.0,
            prompt_lookup_num_tokens=self.lookup, cache_implementation=self.cache,
            **({} if self.compile is None else {"disable_compile": not self.compile}),
        )
        self._calls = 0
        with torch.no_grad():
            out = self.base.generate(ids, attention_mask=torch.ones_like(ids),
                                     generation_config=config)
        tokens = [int(t) for t in out[0, len(prompt):]]
        if eos_id is not None and eos_id in tokens:  # nothing after EOS (padding, if any)
            tokens = tokens[: tokens.index(eos_id) + 1]
        return PeerOutput(tokens, self._calls)


def llama_cpp_missing() -> str | None:
    """Why llama.cpp cannot run here, or None when ``llama_cpp`` imports."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:
        return f"llama-cpp-python is not installed ({e}); install it with {INSTALL_LLAMA_CPP}"
    except OSError as e:  # the package is there but its shared library does not load
        return f"llama-cpp-python does not load ({e}); reinstall it with {INSTALL_LLAMA_CPP}"
    return None


def gguf_precision(path: str | Path) -> str:
    """The quantisation a GGUF file's name states (``SmolLM2-135M-Instruct.Q4_1.gguf`` ->
    ``"Q4_1"``), or ``"GGUF"`` when it states none."""
    m = re.search(r"[.-]((?:I?Q\d[\w]*)|F16|F32|BF16)\.gguf$", Path(path).name, re.IGNORECASE)
    return m.group(1).upper() if m else "GGUF"


class LlamaCpp:
    """llama.cpp (llama-cpp-python) on a GGUF file, greedy; prompt lookup with ``lookup``.

    Greedy is ``temp=0`` (llama.cpp's greedy sampler; no repetition penalty), with flash
    attention on: llama.cpp's own greedy (its low-level default, "auto", turns it on; without
    it, the high-level class's default, a row of a batched forward is not bit-identical to the
    same token decoded alone, and greedy outputs differ from the low-level loop's). The KV
    cache is reset before every prompt, so no call reuses another's prefix. ``eval`` calls are
    counted (one per forward batch: the prompt's prefill and one per step).
    """

    def __init__(self, gguf: str | Path, threads: int, lookup: int | None = None,
                 n_ctx: int = 2048) -> None:
        from llama_cpp import Llama

        kwargs: dict[str, Any] = {"model_path": str(gguf), "n_threads": threads,
                                  "n_threads_batch": threads, "n_ctx": n_ctx, "seed": 0,
                                  "flash_attn": True, "verbose": False}
        if lookup is not None:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            kwargs.update(draft_model=LlamaPromptLookupDecoding(num_pred_tokens=lookup),
                          logits_all=True)
        self.llm = Llama(**kwargs)
        self.lookup = lookup
        self.family = peer_name("llama.cpp", None)
        self.name = peer_name("llama.cpp", lookup)
        self.precision = f"{gguf_precision(gguf)} (llama.cpp, flash attention)"

    def generate(self, prompt: Sequence[int], max_new_tokens: int,
                 eos_id: int | None) -> PeerOutput:
        llm = self.llm
        llm.reset()
        calls = 0
        evaluate = llm.eval

        def counting(tokens: Sequence[int]) -> None:
            nonlocal calls
            calls += 1
            evaluate(tokens)

        llm.eval = counting  # type: ignore[method-assign]
        out: list[int] = []
        try:
            if max_new_tokens > 0:
                for token in llm.generate(list(prompt), top_k=1, top_p=1.0, min_p=0.0,
                                          temp=0.0, repeat_penalty=1.0, reset=True):
                    out.append(int(token))
                    if len(out) >= max_new_tokens or (eos_id is not None
                                                      and int(token) == eos_id):
                        break
        finally:
            del llm.eval  # the class's method again
        return PeerOutput(out, calls)
