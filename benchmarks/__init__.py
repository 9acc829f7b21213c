"""The benchmark harnesses of blockdraft: a package of scripts, run from the repository root as

    python -m benchmarks.NAME [options]         (blockdraft itself importable: installed, or
                                                 PYTHONPATH=src)

It is not part of the blockdraft wheel (pyproject.toml packages ``src`` only). Importing a
harness runs nothing: each runs from its ``if __name__ == "__main__":`` (``main(argv=None) ->
int`` where it has one). Results and the command that made them: ``benchmarks/results/``.

The harnesses (``benchmarks.NAME``):

    bench_costs             the cost curve of verification per runtime, precision and device
    bench_device_step       the whole decode step on the device against the graph greedy
    bench_eval              Kim et al. (2024)'s analyses on real data with self-trained models
    bench_gpu               the GPU benchmark: eager against CUDA graphs, end to end, peers
    bench_heads_chat        how well Medusa heads predict chat: top-k per head and B
    bench_identity          is exact BPD token-identical to greedy on a real model?
    bench_kim               Kim et al. (2024)'s tables on SmolLM2 with its Medusa heads
    bench_prefix_chat       Medusa, prefix heads and a draft layer on the chat set, online
    bench_prefix_cost       what the heads cost at a step: Medusa, prefix heads, a draft layer
    bench_quality           what a runtime's precision costs in quality
    bench_real              faster than greedy on the real model? end to end, peers beside
    bench_rescore           rescoring latency: exact KenLM search against WFST composition
    bench_shortlist         shortlist heads: how much of the vocabulary the heads need
    bench_static_host       the host's share of a decode step
    bench_step_costs        per-step costs of the decode loop
    bench_sweep             one sweep timed on every engine (serial, processes, Ray)
    bench_trees             token trees at equal budget on SmolLM2
    heads_eagle             the draft layer's learning curve beside the heads'
    heads_round2            the heads' learning curve over full epochs
    measure_curve           SmolLM2's cost curve on one runtime (for the cost-aware tree)
    train_answers_rescorer  a neural rescorer trained on the base's own answers
    tune_drafting           tune the drafting recipe on held-out training answers

What they share lives in ``benchmarks.common`` (no harness code; it imports no harness):

    tasks           the evaluation tasks' readers and prompt encoding (plain and chat)
    data            the self-trained benchmarks' data: corpus files, BPE tokenizer, n-gram LM
    real_model      the real-model harnesses' model name, chat prompt cases and heads label
    stand_ins       random-weight models of a real shape, a tiny one, random trees
    peers           what a user would run instead (transformers, llama.cpp), on the same model
    replay          replay files: a real decode's shape, replayed on random weights
    report          the one report writer (JSON beside Markdown, figures), command lines, log
    real_report, tree_report, kim_report, eval_report
                    the pages of bench_real, bench_trees, bench_kim and bench_eval

Two harnesses reuse another's product by importing it: ``bench_sweep`` times sweeps over
``bench_kim``'s chat trace (``benchmarks.bench_kim.ensure_trace``), ``bench_trees`` rescores
with ``bench_real``'s cached n-gram LM (``benchmarks.bench_real.ensure_ngram``).
"""
