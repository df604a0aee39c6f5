"""scripts/children.sh, which `make demo` and `make serve` source: a TERM or Ctrl-C stops the children AND the
script. With a handler that only returned, a TERM while the demo imported its example runs stopped the web server,
then the imports went on and the corpus loader started after it."""
from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
source scripts/children.sh
trap_children
sleep 300 & pids+=($!)
echo "child $!"
for i in 1 2 3 4 5 6 7 8; do x=$(sleep 0.5; echo $i); echo "step $x"; done
echo "went on"
"""


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_children_and_the_script(sig, code):
    proc = subprocess.Popen(["bash", "-c", SCRIPT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline().split()[1])
    time.sleep(1.2)  # inside the loop, in a foreground command substitution
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == code, out
    assert "stopping the web server" in out and "went on" not in out and "step 8" not in out
    assert subprocess.run(["kill", "-0", str(child)], capture_output=True).returncode != 0  # the child is gone
