# blockdraft: set-up, tests and the demo on a fresh machine of this kind.
#   make test   -> system deps, .venv (its editable install builds the native search, setup.py),
#                  KenLM's lmplz + build_binary (the estimator's reference), the fast test suite
#   make demo   -> the same set-up, then the main job on the embedded default corpus
# Both install the tested set, requirements.lock (`make lock` refreshes it from pyproject.toml's
# ranges; `make test-latest` runs the suite on the newest releases those ranges allow).
PY      := .venv/bin/python
STAMP   := .venv/.blockdraft-installed
NATIVE  := src/blockdraft/_native/libbdkenlm.so

.PHONY: setup test test-all test-latest lock demo lint bench bench-quick bench-rescore bench-steps clean \
	wheel-check \
	bench-real bench-real-quick bench-real-smoke bench-real-peers-setup bench-trees bench-costs \
	bench-shortlist package-drafting bench-sweep

setup: $(STAMP) $(NATIVE) build/kenlm/.stamp

$(STAMP): pyproject.toml requirements.lock scripts/setup_venv.sh
	bash scripts/install_system_deps.sh
	bash scripts/setup_venv.sh
	touch $@

# The native search, rebuilt in place when its sources change (setup_venv.sh built it first).
$(NATIVE): setup.py $(shell find native -type f) | $(STAMP)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .

build/kenlm/.stamp: $(STAMP) scripts/build_kenlm.sh
	bash scripts/build_kenlm.sh
	touch $@

test: setup
	$(PY) -m pytest -q

test-all: setup
	$(PY) -m pytest -q -m "slow or not slow"

# The package as a pip user gets it: sdist -> wheel -> a fresh venv with the lock, where the
# native search, ngram train, a tiny decode and the rescoring benchmark run (scripts/wheel_check.sh;
# CI runs it after the tests, about 2 minutes).
wheel-check: setup
	bash scripts/wheel_check.sh

# The newest releases pyproject.toml allows, in a second venv (.venv-latest); not part of CI.
test-latest: build/kenlm/.stamp
	bash scripts/test_latest.sh

# Re-resolve requirements.lock (pip's resolver over pyproject.toml's ranges, every extra).
lock:
	bash scripts/lock.sh

demo: setup
	$(PY) -m blockdraft demo --overwrite

lint: setup
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m mypy src benchmarks

bench: setup
	$(PY) -m benchmarks.bench_eval

bench-quick: setup
	$(PY) -m benchmarks.bench_eval --quick

bench-rescore: setup
	$(PY) -m benchmarks.bench_rescore

bench-steps: setup
	$(PY) -m benchmarks.bench_step_costs

# End to end on the real model (SmolLM2 + Medusa heads), peers beside: benchmarks/results/real/.
# llama.cpp peers only after `make bench-real-peers-setup` (compiles llama-cpp-python, ~5 min).
bench-real: setup
	$(PY) -m benchmarks.bench_real --full --prompts-per-task 2 --task-prompts chat=12 \
		--tasks qa-squad,sum-cnndm,sum-samsum,mt-wmt14-deen,explain,cont-lambada,chat \
		--k 8 --p 4 --p-verify trie --context-weight 0.2 \
		--lm src/blockdraft/models/hf/heads/smollm2/ngram/answers4.bin \
		--runtimes torch:float32,onnxruntime:float32 \
		--strategies default,vanilla,vanilla-depth,ngram,pbest-ngram,lookup,vanilla-lookup \
		--runtime-strategies "pt32=vanilla,lookup" --threads 1

# The verification cost curve per runtime (benchmarks/results/costs/).
bench-costs: setup
	$(PY) -m benchmarks.bench_costs --model smollm2 \
		--variants torch:float32,onnxruntime:float32,onnxruntime:int8 --threads 1 \
		--out benchmarks/results/costs

bench-real-quick: setup
	$(PY) -m benchmarks.bench_real

bench-real-smoke: setup
	$(PY) -m benchmarks.bench_real --smoke

# Token trees at equal budget on SmolLM2 (chain, p-best tries, Medusa, EAGLE-2-style, rescored):
# benchmarks/results/trees/.
bench-trees: setup
	$(PY) -m benchmarks.bench_trees --full

bench-real-peers-setup: setup
	bash scripts/install_llama_cpp.sh

clean:
	rm -rf build .venv .venv-latest .pytest_cache

# Kim et al. (2024)'s Tables 3, 4, 5, Fig. 6 and latency on SmolLM2 + its Medusa heads, from two
# traces recorded once and cached (chat set, task prompts): benchmarks/results/kim/. Rescorers
# plug in by KIM_ARGS, e.g. KIM_ARGS="--lm textbooks=lm4.bin --neural rescorer-dir".
.PHONY: bench-kim
bench-kim: setup
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.bench_kim $(KIM_ARGS)

# One sweep on SmolLM2 (34 configurations: k 4,8,16 x p 1,4,16 x alpha 0.5,1,2 x {none, the
# packaged answers 4-gram}) timed serially, on 2 processes and on a local Ray of 2 CPUs, with
# offline = online on 4 prompts: benchmarks/results/sweep/. Run it on a quiet machine; the trace
# is bench-kim's chat trace (SWEEP_ARGS="--trace DIR" for another: the committed example used
# package-drafting's held-out trace, build/drafting/trace-heldout, recorded with the packaged heads).
bench-sweep: setup
	OMP_NUM_THREADS=1 $(PY) -m benchmarks.bench_sweep --k 4,8,16 --p 1,4,16 --alpha 0.5,1,2 \
		--lm none src/blockdraft/models/hf/heads/smollm2/ngram/answers4.bin --online 4 \
		--out benchmarks/results/sweep $(SWEEP_ARGS)

# The packaged heads' shortlist size: coverage, B and step time by size (benchmarks/results/shortlist).
bench-shortlist: setup
	$(PY) -m benchmarks.bench_shortlist --distill $(DISTILL) --trace chat=$(CHAT_TRACE) \
		--trace tasks=$(TASKS_TRACE) --sizes 2048,4096,8192,16384,32768 --threads 1

# The packaged heads' shortlist, n-gram LM, acceptance tables and settings, from a distillation set
# (DISTILL=...): scripts/package_drafting.sh.
package-drafting: setup
	DISTILL=$(DISTILL) bash scripts/package_drafting.sh
