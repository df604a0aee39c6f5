#!/usr/bin/env bash
# Called by scripts/demo.sh once the web server and the workers run.
#   demo_data.sh now         the first 1,000 bundled Wikipedia summaries, embedded here (search
#                            and the demo run work at once);
#   demo_data.sh background  the other ~9,000 in this process (demo.sh runs it niced, in the
#                            background), so neither the demo run on `cpu` nor a short job on `short`
#                            waits for it (progress bar on /corpora/).
# Re-running skips what is already loaded (content-hash dedup), so a second `make demo` starts in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
case "${1:-all}" in
  now)        $PY manage.py load_wikipedia --corpus wikipedia --limit 1000 ;;
  background) exec $PY manage.py load_wikipedia --corpus wikipedia --offset 1000 ;;
  all)        $PY manage.py load_wikipedia --corpus wikipedia --limit 1000
              exec $PY manage.py load_wikipedia --corpus wikipedia --offset 1000 ;;
  *) echo "usage: scripts/demo_data.sh [now|background|all]" >&2; exit 2 ;;
esac
