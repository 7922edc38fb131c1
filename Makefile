# Two commands on a fresh machine:  `make demo`  and  `make test`.  Everything else here serves them.
PY      ?= python3
VENV    ?= .venv
PORT    ?= 6006
HOST    ?= 127.0.0.1
DEMO    ?= demo_out
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
BUNDLE  := tbprobe/tb_plugin/static/index.js
FRONTEND_SRC := $(shell find frontend -path frontend/node_modules -prune -o -type f -print 2>/dev/null)

.PHONY: setup system python frontend hf test lint pytest vitest demo bench clean

setup: system python frontend

# Debian packages the end-to-end tests need: Chromium for Playwright, CJK fonts for the Chinese screenshots.
system:
	@PY=$(PY) bash scripts/setup_system.sh

python: $(STAMP)
$(STAMP): setup.py $(wildcard tbprobe/*/*.c tbprobe/*/*.h tbprobe/*/*.cpp)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	# torch first, and no build isolation: the C++ gradient hooks (tbprobe/collector/_cgrad.cpp) build against
	# this venv's torch (setup.py)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q --no-build-isolation -e '.[test]'
	touch $@

frontend: $(BUNDLE)
$(BUNDLE): $(FRONTEND_SRC)
	@if [ -f frontend/package.json ]; then \
	  cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm run build; \
	else echo "frontend/: no package.json yet, keeping the placeholder bundle"; fi

# transformers, pinned, in .deps/hf, for the tests on transformers' models (tbprobe does not need it; without it
# those tests skip with the reason)
hf: python
	@bash scripts/hf_deps.sh || echo "transformers not installed: the tests on transformers' models will skip"

lint: python
	$(BIN)/ruff check tbprobe tests bench examples

vitest: frontend
	@if [ -f frontend/package.json ]; then cd frontend && npm test; fi

pytest: python hf
	$(BIN)/pytest

test: setup lint vitest pytest

demo: setup
	$(BIN)/python examples/demo.py --out $(DEMO)
	@echo ""
	@echo "TensorBoard: http://$(HOST):$(PORT)/#graph_ascend   (Ctrl-C to stop)"
	$(BIN)/tensorboard --logdir $(DEMO) --host $(HOST) --port $(PORT)

bench: setup
	bash bench/run_all.sh

clean:
	rm -rf $(DEMO) .pytest_cache build *.egg-info
