"""The demo on a real pretrained model (the default of ``blockdraft demo``):
:func:`run_real_demo` loads the model and its Medusa heads, trains or loads the cached
n-gram LM over its token ids, decodes the demo's chat prompts with every strategy (timed in
this run) and draws one step's lattice. See the package docstring for what it shows."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.checks import check_positive_int
from blockdraft.core.efficiency import block_efficiency
from blockdraft.demo.config import (
    DRAW_K,
    NGRAM_ALPHA,
    REAL_ALSO_PRECISION,
    REAL_DTYPE,
    REAL_K,
    REAL_MAX_NEW_TOKENS,
    REAL_MODEL,
    REAL_ORDER,
    REAL_P,
    REAL_PRECISION,
    REAL_PROMPTS,
    REAL_RUNTIME,
)
from blockdraft.demo.decode import fields
from blockdraft.demo.errors import DemoError
from blockdraft.demo.ngram import Progress, prepare_ngram
from blockdraft.demo.prepare import write_json
from blockdraft.demo.results import LatticeView, RealDemoResult, RealDemoRow
from blockdraft.demo.run import pick_threads
from blockdraft.models.capabilities import capabilities_of
from blockdraft.verify.records import TimeSplit

WARMUP_TOKENS = 2  # tokens of each untimed warm-up decode
WARMUP_PROMPT = 8  # tokens of the first prompt's start it decodes from
LABEL_LEN = 12  # characters of a token's text in the lattice table

@dataclass(frozen=True)
class Strategy:
    """One row of the demo: ``drafter()`` builds its drafter (None: a greedy loop); ``torch``
    runs it on the PyTorch model instead of the chosen runtime's (the second reference);
    ``tree``: it verifies several drafts a step (their token tree); ``precision``: it runs on
    the same runtime in this other precision (the rows beside, held against that precision's
    own greedy row), or ``""``."""

    label: str
    spec: Any  # a DraftSpec, or None for a greedy loop
    settings: str
    torch: bool = False
    tree: bool = False
    precision: str = ""


def real_strategies(ngram: str, order: int, runtime: str, trees: bool = True) -> list[Strategy]:
    """Greedy on the runtime (the reference), the PyTorch greedy loop (when the runtime is
    another), blockdraft's default (what ``decode(model, ids)`` does with no settings: the
    cost-aware tree of the heads' chain, rescored p-best paths and prompt lookup; one path a
    step where trees take a confirming forward), vanilla heads, n-gram rescoring (p = 1), p-best
    n-gram (their trie), prompt lookup, and n-gram rescored heads with the lookup draft
    beside them, each named by its :class:`~blockdraft.drafts.DraftSpec` (``ngram``: the
    n-gram LM's file); without ``trees`` (a runtime whose token trees take a confirming second
    forward: ONNX Runtime int8 and q4) only the strategies of one draft a step."""
    from blockdraft.drafts import DraftSpec

    lm = f"{order}-gram"
    rescored: dict[str, Any] = {"rescorer": "ngram", "lm": ngram, "alpha": NGRAM_ALPHA}
    out = [Strategy("greedy", None, "k:-|p:-|alpha:-|lm:none")]
    if runtime != "torch":
        out.append(Strategy("greedy (PyTorch)", None, "k:-|p:-|alpha:-|lm:none|runtime:torch",
                            torch=True))
    out += [
        Strategy("blockdraft default (cost-aware tree)", DraftSpec("default"),
                 "drafter:default|tree:cost-aware|recipe:packaged"),
        Strategy("vanilla heads", DraftSpec("heads"), "k:1|p:1|alpha:0|lm:none"),
        Strategy(f"{lm} rescoring", DraftSpec("heads", k=REAL_K, p=1, **rescored),
                 f"k:{REAL_K}|p:1|alpha:{NGRAM_ALPHA}|lm:{lm}"),
        Strategy(f"{REAL_P}-best {lm}", DraftSpec("heads", k=REAL_K, p=REAL_P, **rescored),
                 f"k:{REAL_K}|p:{REAL_P}|alpha:{NGRAM_ALPHA}|lm:{lm}", tree=True),
        Strategy("prompt lookup", DraftSpec("lookup"),
                 "k:1|p:1|alpha:-|lm:none|lookup:n<=4,L=2/6/10"),
        Strategy(f"{lm} + lookup", DraftSpec("combined", k=REAL_K, p=1, **rescored),
                 f"k:{REAL_K}|p:2|alpha:{NGRAM_ALPHA}|lm:{lm}|lookup:n<=4,L=2/6/10", tree=True),
    ]
    return [st for st in out if trees or not st.tree]


def beside_strategies(precision: str) -> list[Strategy]:
    """The rows run beside in another ``precision`` of ONNX Runtime (the GGUF file's own
    blocks for ``q4``): its greedy loop (their reference), blockdraft's default and prompt
    lookup, all of one draft a step (token trees there take a confirming second forward)."""
    from blockdraft.drafts import DraftSpec

    tag = f"runtime:onnxruntime|precision:{precision}"
    return [Strategy(f"greedy ({precision})", None, f"k:-|p:-|alpha:-|lm:none|{tag}",
                     precision=precision),
            Strategy(f"blockdraft default ({precision})", DraftSpec("default"),
                     f"drafter:default|tree:cost-aware|recipe:packaged|{tag}",
                     precision=precision),
            Strategy(f"prompt lookup ({precision})", DraftSpec("lookup"),
                     f"k:1|p:1|alpha:-|lm:none|lookup:n<=4,L=2/6/10|{tag}",
                     precision=precision)]


def encode_prompts(tok: Any, prompts: Sequence[str]) -> list[list[int]]:
    """Each prompt as one user turn in the model's chat template, ending with the assistant's
    turn opener; a tokenizer without a template gets the plain text and a newline."""
    if tok.has_chat_template:
        return [[int(i) for i in tok.apply_chat_template([{"role": "user", "content": q}])]
                for q in prompts]
    return [[int(i) for i in tok.encode(q + "\n")] for q in prompts]


def _name(source: Any) -> str:
    text = str(source)
    return Path(text).name if os.sep in text or Path(text).exists() else text


def run_real_demo(
    model: Any = REAL_MODEL,
    out_dir: Path = Path("demo-output"),
    *,
    heads: str | os.PathLike[str] | None = None,
    dtype: str | None = REAL_DTYPE,
    runtime: str = REAL_RUNTIME,
    precision: str = REAL_PRECISION,
    also_precision: str | None = REAL_ALSO_PRECISION,
    corpus: Path | None = None,
    prompts: Sequence[str] = REAL_PROMPTS,
    max_new_tokens: int = REAL_MAX_NEW_TOKENS,
    threads: int | None = None,
    progress: Progress | None = None,
    log: Callable[[str], None] = print,
) -> RealDemoResult:
    """Decode chat prompts on a real model with every strategy and measure them.

    Args:
        model: a name or path :func:`blockdraft.models.load_model` takes (default
            ``"smollm2"``: SmolLM2-135M-Instruct and its packaged Medusa heads), or a loaded
            heads model with a ``tokenizer`` (e.g. an
            :class:`~blockdraft.models.hf.HFBlockwiseModel`; ``heads`` and ``dtype`` are then
            ignored). A blockdraft checkpoint folder works too (its tokenizer has no chat
            template: the prompts are then plain text).
        out_dir: where ``demo.json`` and the lattice drawing go (created).
        heads: Medusa heads for ``model`` (any layout), overriding packaged ones.
        dtype: the PyTorch model's dtype: ``"float32"`` (default: exact, and what is
            exported to another runtime), ``"bfloat16"`` or ``"float16"``.
        runtime: where the strategies run: ``"onnxruntime"`` (default: the fastest lossless
            runtime on a CPU), ``"torch"`` or ``"static"`` (transformers on a static cache,
            CUDA graphs on a GPU; its precision is ``dtype``); with another runtime than torch
            the PyTorch greedy loop runs too, as a second reference.
        precision: the runtime's precision (``"float32"``, or ``"int8"`` or ``"q4"`` on
            onnxruntime: q4 runs the GGUF file's own blocks, a model loaded from one).
        also_precision: rows beside in this other precision of ONNX Runtime
            (:func:`beside_strategies`: greedy, the default, prompt lookup; default ``"q4"``,
            the GGUF file's own blocks), each held against that precision's own greedy row;
            run when the demo runs on ONNX Runtime in another precision and the model was
            loaded by name or path from a GGUF file (a line says why otherwise); None: none.
        corpus: the n-gram LM's text (None: ``pydoc_data.topics``).
        prompts: the user turns to decode (default :data:`REAL_PROMPTS`).
        max_new_tokens: tokens per prompt (EOS stops earlier).
        threads: intra-op threads of both runtimes (default: the cores not already busy).
        progress: a progress-bar factory (see :data:`~blockdraft.demo.ngram.Progress`).
        log: hears one line per step (those about training start with ``"training"``).

    Returns:
        A :class:`RealDemoResult`: greedy's row first; every rate measured in this run.

    Raises:
        DemoError: no prompts, a model without a tokenizer, bad settings.
        ModelError: the model or heads could not be loaded (the message says what to do).
    """
    import torch

    from blockdraft.core.signature import environment, format_signature, human_count

    t_start = time.perf_counter()
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens", DemoError)
    prompts = tuple(str(q) for q in prompts)
    if not prompts or not all(q.strip() for q in prompts):
        raise DemoError("the demo needs at least one prompt, and no prompt may be empty")
    n_threads = pick_threads(threads)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(n_threads)
    try:
        t0 = time.perf_counter()
        if isinstance(model, (str, os.PathLike)):
            from blockdraft.models import load_model
            from blockdraft.models.hf.loading import KNOWN_MODELS, needs_dequantising

            model_name = _name(model)
            log(f"loading {model_name} ({dtype or 'float32'})" + (
                "; its first load dequantises the GGUF file once into the cache (about a "
                "minute)" if needs_dequantising(model) else ""))
            net = load_model(model, dtype=dtype, heads=heads)
            torch_net = net
            if runtime != "torch":
                from blockdraft.models.runtimes import on_runtime

                log(f"preparing {runtime} ({precision}): a first export takes a few seconds, "
                    "then it is cached")
                net = on_runtime(net, runtime, precision, threads=n_threads, log=log)
            heads_name = (_name(heads) if heads is not None else "packaged"
                          if str(model) in KNOWN_MODELS else "the model's own")
            beside = _beside(torch_net, model, runtime, precision, also_precision, n_threads,
                             log)
        else:
            net = torch_net = model
            runtime = capabilities_of(net).runtime
            model_name = capabilities_of(net).name
            heads_name = "given"
            beside = None
        load_s = time.perf_counter() - t0
        tok = net.tokenizer
        if tok is None and isinstance(model, (str, os.PathLike)):
            from blockdraft.models import ModelError, load_tokenizer

            try:  # a blockdraft checkpoint keeps its tokenizer beside the weights
                tok = load_tokenizer(model)
            except ModelError:
                tok = None
        if tok is None:
            raise DemoError(f"the model {model_name} has no tokenizer; the demo needs one to "
                            "encode its prompts and its n-gram text (save the tokenizer in "
                            "the model folder)")
        h = int(net.h)
        net_dtype = capabilities_of(net).precision
        eos = tok.eos_id

        ngram = prepare_ngram(tok, model_name, corpus, REAL_ORDER, log, progress)
        lm_file = str(ngram.lm.path)
        trees = capabilities_of(net).exact_trees
        plan = real_strategies(lm_file, ngram.lm.order, runtime, trees)
        if not trees:
            skipped = [st.label for st in real_strategies(lm_file, ngram.lm.order, runtime)
                       if st.tree]
            log(f"{runtime} {precision}'s tree rows are not its chain rows bit for bit, so a "
                "token tree's path takes a second, confirming forward there (lossless, slower "
                f"than one draft a step): skipping {', '.join(skipped)}, which verify several "
                "drafts a step")
        if beside is not None:
            plan += beside_strategies(str(also_precision))
        nets = {"": net, "torch": torch_net, str(also_precision): beside}
        ids = encode_prompts(tok, prompts)
        chat = tok.has_chat_template

        t0 = time.perf_counter()
        log("warming up (one short untimed decode per strategy)")
        for st in plan:  # first calls load libraries and allocate: not timed
            _decode(nets[_on(st)], ids[0][:WARMUP_PROMPT], st, WARMUP_TOKENS, eos)
        warmup_s = time.perf_counter() - t0

        log(f"decoding {len(ids)} {'chat ' if chat else ''}prompts x {len(plan)} strategies, "
            f"{max_new_tokens} new tokens at most, {n_threads} torch thread(s)")
        # Each prompt visits the strategies in a rotated order, so no strategy always runs
        # first (or right after another's) while the machine's load drifts.
        jobs = [(i, (i + j) % len(plan)) for i in range(len(ids)) for j in range(len(plan))]
        outputs: dict[tuple[int, int], list[int]] = {}
        calls: dict[tuple[int, int], int] = {}
        wall = [0.0] * len(plan)
        splits: list[TimeSplit | None] = [None] * len(plan)
        t0 = time.perf_counter()
        for i, s in (jobs if progress is None else progress("decoding")(jobs)):
            st = plan[s]
            t1 = time.perf_counter()
            tokens, n_calls, split = _decode(nets[_on(st)], ids[i], st, max_new_tokens, eos)
            wall[s] += time.perf_counter() - t1
            old = splits[s]
            splits[s] = split if old is None else old + split
            outputs[i, s], calls[i, s] = tokens, n_calls
        decode_s = time.perf_counter() - t0

        shared: dict[str, object] = {
            "model": model_name, "heads": heads_name, "dtype": net_dtype, "h": h,
            "prompts": len(ids), "max_new": max_new_tokens,
            "chat": chat, "criterion": "exact", "runtime": runtime,
            "precision": precision if runtime != "torch" else net_dtype,
            "order": ngram.lm.order, "ngrams": human_count(sum(ngram.counts)),
            "corpus": ngram.corpus, "threads": n_threads, **environment(),
        }
        rows = []
        torch_row = next((j for j, st in enumerate(plan) if st.torch), None)
        for s, st in enumerate(plan):
            label, settings = st.label, st.settings
            n_tokens = sum(len(outputs[i, s]) for i in range(len(ids)))
            n_calls = sum(calls[i, s] for i in range(len(ids)))
            ref = next(j for j, o in enumerate(plan)  # the greedy loop of its own precision
                       if o.spec is None and not o.torch and o.precision == st.precision)
            same = sum(outputs[i, s] == outputs[i, ref] for i in range(len(ids)))
            row_split = splits[s]
            assert row_split is not None
            rows.append(RealDemoRow(
                strategy=label, block_efficiency=block_efficiency(n_tokens, n_calls),
                tokens=n_tokens, calls=n_calls, wall_s=wall[s],
                draft_s=row_split.lattice_s + row_split.draft_s, split=_split_dict(row_split),
                speedup=wall[ref] / wall[s] if wall[s] else 0.0,
                speedup_torch=(wall[torch_row] / wall[s] if torch_row is not None and wall[s]
                               else None),
                identical=same, prompts=len(ids), settings=settings,
                signature=_signature(shared, fields(settings))))

        out_dir.mkdir(parents=True, exist_ok=True)
        greedy0 = outputs[0, 0]
        view, png = draw_step(net, tok, ids[0], greedy0, out_dir / "demo_lattice.png")
        result = RealDemoResult(
            rows=tuple(rows), model=model_name, heads=heads_name, dtype=net_dtype, h=h,
            runtime=runtime,
            prompts=prompts, chat=chat, max_new_tokens=max_new_tokens, sample_prompt=prompts[0],
            sample_answer=tok.decode(greedy0, skip_special_tokens=True), lattice=view,
            lattice_png=png, corpus=ngram.corpus, ngram_path=ngram.path,
            ngram_counts=ngram.counts, ngram_trained=ngram.trained, load_s=load_s,
            ngram_s=ngram.seconds, warmup_s=warmup_s, decode_s=decode_s, threads=n_threads,
            signature=format_signature(shared), seconds=time.perf_counter() - t_start,
        )
        write_json(out_dir / "demo.json", result.to_dict())
        return result
    finally:
        torch.set_num_threads(old_threads)


def _on(strategy: Strategy) -> str:
    """Which model a row runs on: ``""`` the demo's runtime, ``"torch"``, or a precision."""
    return "torch" if strategy.torch else strategy.precision


def _beside(torch_net: Any, source: Any, runtime: str, precision: str, also: str | None,
            threads: int, log: Callable[[str], None]) -> Any:
    """The model of the rows beside (:func:`beside_strategies`) in precision ``also`` on ONNX
    Runtime, or None (with a line saying why) where they do not apply."""
    if also is None or also == precision:
        return None
    if runtime != "onnxruntime":
        log(f"no {also} rows: they run on ONNX Runtime; this demo runs on {runtime}")
        return None
    from blockdraft.models.hf.loading import gguf_source
    from blockdraft.models.runtimes import on_runtime

    gguf = gguf_source(str(source)) if also == "q4" else None
    if also == "q4" and gguf is None:
        log(f"no q4 rows: q4 verifies on a GGUF file's own blocks, and {_name(source)} was not "
            "loaded from one")
        return None
    log(f"preparing onnxruntime ({also}) for the rows beside: a first export takes a minute, "
        "then it is cached")
    return on_runtime(torch_net, "onnxruntime", also, threads=threads, log=log, gguf=gguf)


def _split_dict(split: TimeSplit) -> dict[str, float]:
    """A call's :class:`TimeSplit` as the seconds a demo row records: the prefill, the
    steps' parts, and what lies outside both."""
    return {"prefill_s": split.prefill_s, "forward_s": split.forward_s,
            "heads_s": split.heads_s, "lattice_s": split.lattice_s,
            "search_s": split.draft_s, "other_s": split.other_s,
            "outside_s": split.outside_s, "steps": float(split.steps)}


def _signature(shared: Mapping[str, object], own: Mapping[str, object]) -> str:
    """The shared settings then the row's own (a row's setting replaces a shared one: the
    PyTorch loop's runtime)."""
    from blockdraft.core.signature import format_signature

    return format_signature({**{k: v for k, v in shared.items() if k not in own}, **own})


def _decode(model: Any, prompt: list[int], strategy: Strategy, max_new_tokens: int,
            eos: int | None) -> tuple[list[int], int, TimeSplit]:
    """``(tokens, serial calls, where the call's time went)`` of one strategy on one prompt
    (a greedy loop: one call per token, its steps all forward)."""
    from blockdraft.models import greedy_generate
    from blockdraft.verify import decode

    if strategy.spec is None:
        clock: list[float] = []
        start = time.perf_counter()
        tokens = greedy_generate(model, prompt, max_new_tokens, eos_id=eos, clock=clock)
        wall = time.perf_counter() - start
        return tokens, len(tokens), TimeSplit.greedy(wall, clock, len(tokens))
    start = time.perf_counter()
    res = decode(model, prompt, drafter=strategy.spec, criterion="exact",
                 max_new_tokens=max_new_tokens, eos_id=eos)
    wall = time.perf_counter() - start
    return res.tokens, res.calls, dataclasses.replace(res.split, wall_s=wall)


def draw_step(model: Any, tok: Any, prompt: list[int], greedy: list[int],
              png: Path) -> tuple[LatticeView, Path]:
    """The lattice of one step in the middle of ``prompt``'s greedy answer (top
    :data:`DRAW_K` of each head, from one forward over the prompt and the answer so far, as
    any decode of it sees that step), with greedy decoding's path: as text, and drawn to
    ``png`` (greedy path in red, Kim et al. Fig. 4)."""
    import torch

    from blockdraft.lattice import SausageLattice
    from blockdraft.lattice.draw import draw_lattice, token_text
    h = int(model.h)
    # The middle of the answer, where the heads draft text rather than its opening; early
    # enough that the next h greedy tokens are known when the answer has them.
    j = max(0, min(len(greedy) // 2, len(greedy) - h))
    x = torch.tensor([prompt + greedy[:j]], device=model.device)
    with torch.no_grad():  # only the last position's projections when the model can skip
        logits, _ = (model.heads_logits(x, None, last_only=True)
                     if capabilities_of(model).last_only else model.heads_logits(x, None))
    lat = SausageLattice.from_logits(logits[0, -1].float().cpu().numpy(), k=DRAW_K,
                                     certain_first=True)
    ahead = greedy[j:j + h]

    def label(t: int) -> str:
        return str(tok.decode([t]))

    slots = []
    ranks: list[int | None] = []
    for i in range(h):
        tokens, scores = lat.slot(i)
        slots.append(tuple((token_text(int(t), label, max_label_len=LABEL_LEN), float(s))
                           for t, s in zip(tokens, scores, strict=True)))
        hit = np.flatnonzero(tokens == ahead[i]) if i < len(ahead) else np.array([])
        ranks.append(int(hit[0]) if hit.size else None)
    title = (f"prompt 1, the step at answer token {j + 1}: top {DRAW_K} of each of {h} heads "
             "(scores in nats); greedy path")
    reference = np.asarray(ahead, dtype=np.int64) if len(ahead) == h else None
    draw_lattice(lat, png, reference=reference, labels=label, title=title + " in red")
    view = LatticeView(title=title + " highlighted", slots=tuple(slots),
                       greedy=tuple(token_text(t, label, max_label_len=LABEL_LEN)
                                    for t in ahead),
                       greedy_rank=tuple(ranks))
    return view, png
