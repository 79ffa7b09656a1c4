# The README's quick start: `make demo` and `make test`. Each creates .venv when missing and
# installs the project from PyPI; `make test` adds its test extras (torch pinned to the CPU build).
# demo: a roofline sweep, an ablation (baseline / te / cdu / dsu / all three) on a Mooncake sample
# at an operating point one TP8 group sustains (prefill on its own pool), and an 8-point design
# sweep on a local Ray cluster with its Pareto plot. Its tables and plots land in docs/figures/demo.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# the demo needs the package; the tests also need its test extras (torch, transformers)
STAMP := $(VENV)/.tricut-installed
TEST_STAMP := $(VENV)/.tricut-test-installed
PYTEST_WORKERS ?= 2
DEMO := docs/figures/demo

.PHONY: demo test install clean peer-aic bytecode

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(TEST_STAMP)

install: $(TEST_STAMP)

demo: $(STAMP) bytecode
	@mkdir -p $(DEMO) .build/demo
	$(VENV)/bin/tricut roofline --model llama-3-70b --gpu h100-sxm5 --tp 8 \
		--kv-dtype bf16,fp8,nvfp4 --context 8192,131072 --batch 1,16 > $(DEMO)/roofline.txt
	@cat $(DEMO)/roofline.txt
	$(VENV)/bin/tricut compare --model llama-3-70b --gpu h100-sxm5 --tp 8 \
		--trace sim/data/mooncake_conversation_sample.jsonl --prefill disaggregated \
		--plot $(DEMO) > $(DEMO)/compare.txt
	@cat $(DEMO)/compare.txt
	$(VENV)/bin/tricut sweep sweeps/smoke.toml --db .build/demo/smoke.duckdb --resume --workers 2
	$(VENV)/bin/tricut sweep plot --db .build/demo/smoke.duckdb -o $(DEMO)
	@echo
	@echo "tables and plots: $(DEMO)/ (roofline.txt, compare.txt, latency_cdf.png, hbm_bandwidth.png, energy_split.png,"
	@echo "the sweep's Pareto plot and heat map); what the columns mean: docs/metrics.md;"
	@echo "the same ablation with prefill on the decode GPUs (--prefill colocated) overloads the group."

# the project's own modules compiled to bytecode once, before the runs: where
# PYTHONDONTWRITEBYTECODE is set, no process writes bytecode, and every one of the suite's
# processes (pytest's workers, the cocotb simulators, the command-line runs, Ray's workers)
# would compile each module it imports from source again (pip compiles what it installs)
bytecode: $(STAMP)
	$(PY) -m compileall -q -j 0 models rtl sim benchmarks

# --dist loadfile: a test file's tests run on one worker, so that the other worker does not
# sit waiting on the build lock of the Verilator build the first one is compiling
test: $(TEST_STAMP) bytecode
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile -q

# NVIDIA's AIConfigurator, the peer of docs/fidelity.md, in an environment of its own (its
# dependencies are not tricut's): benchmarks/fidelity.py runs it from there
PEER_AIC := .build/peer-aic
peer-aic: $(PEER_AIC)/.installed

$(PEER_AIC)/.installed:
	test -x $(PEER_AIC)/bin/python || $(PYTHON) -m venv $(PEER_AIC)
	$(PEER_AIC)/bin/python -m pip install --quiet --disable-pip-version-check aiconfigurator==0.12.0
	touch $@

clean:
	rm -rf .build
