# The README's quick start: `make demo` and `make test`. Each creates .venv when missing and
# installs the project with its test extras from PyPI (torch is pinned to the CPU build).
# demo: a roofline sweep, an ablation on a Mooncake sample, and an 8-point design sweep on a
# local Ray cluster with its Pareto plot.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tricut-installed
PYTEST_WORKERS ?= 2

.PHONY: demo test install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tricut roofline --model llama-3-70b --gpu h100-sxm5 --tp 8 \
		--kv-dtype bf16,fp8,nvfp4 --context 8192,131072 --batch 1,16
	$(VENV)/bin/tricut compare --model llama-3-70b --gpu h100-sxm5 --tp 8 \
		--trace sim/data/mooncake_conversation_sample.jsonl --plot .build/demo
	$(VENV)/bin/tricut sweep sweeps/smoke.toml --db .build/demo/smoke.duckdb --resume --workers 2
	$(VENV)/bin/tricut sweep plot --db .build/demo/smoke.duckdb -o .build/demo
	@echo "figures: .build/demo/*.png"

test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) -q

clean:
	rm -rf .build
