#!/usr/bin/env bash
# Called by scripts/demo.sh once the web server and the workers run.
#   demo_data.sh now         the first 1,000 bundled Wikipedia summaries, embedded here (search
#                            and the demo run work at once);
#   demo_data.sh background  the other ~9,000 as a job on the `default` queue, served by the demo's
#                            loader worker, so the demo run on `cpu` is not kept waiting (progress
#                            bar on /corpora/).
# Re-running skips what is already loaded (content-hash dedup), so a second `make demo` starts in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
case "${1:-all}" in
  now)        $PY manage.py load_wikipedia --corpus wikipedia --limit 1000 ;;
  background) $PY manage.py load_wikipedia --corpus wikipedia --offset 1000 --enqueue --queue default ;;
  all)        $PY manage.py load_wikipedia --corpus wikipedia --limit 1000
              $PY manage.py load_wikipedia --corpus wikipedia --offset 1000 --enqueue --queue default ;;
  *) echo "usage: scripts/demo_data.sh [now|background|all]" >&2; exit 2 ;;
esac
