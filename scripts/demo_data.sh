#!/usr/bin/env bash
# Called by scripts/demo.sh once the web server and the worker run: the first 1,000 bundled
# Wikipedia summaries are embedded now (search works at once), the other ~9,000 go to the
# worker as a background job on the `cpu` queue (progress bar on /corpora/). Re-running skips
# what is already loaded (content-hash dedup), so a second `make demo` starts in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
$PY manage.py load_wikipedia --corpus wikipedia --limit 1000
$PY manage.py load_wikipedia --corpus wikipedia --offset 1000 --enqueue
