"""Print the short table of $OUT/results.jsonl (the last thing each phase of run_learn.sh / run_measure.sh prints)."""
from __future__ import annotations

import json
import sys

from common import OUT, table


def main() -> None:
    path = OUT / "results.jsonl"
    rows = [json.loads(line) for line in open(path)] if path.exists() else []
    if not rows:
        print("no results")
        return
    out = []
    trl = {r["device"]: r["step_s"] for r in rows if r["bench"] == "grpo_step" and r["impl"].startswith("trl") and "hf" in r["impl"]}
    for r in rows:
        b = r["bench"]
        if b == "matmul":
            out.append({"what": "bf16 matmul 8192^3", "value": f'{r["bf16_tflops"]:.0f} TFLOP/s'})
        elif b == "packing_check":
            out.append({"what": "packed vs padded logprob |diff| (bf16)",
                        "value": f'max {r["max_abs_logprob_diff"]:.3g} mean {r["mean_abs_logprob_diff"]:.3g}'})
        elif b == "update_mfu":
            out.append({"what": f'update 1.39B {r["variant"]}', "value": f'{r["step_s"]:.3f} s',
                        "note": f'MFU {100 * r["mfu_vs_measured"]:.1f}%  {r["tokens_per_s"]:.0f} tok/s  {r["peak_mem_gb"]:.0f} GB'})
        elif b == "grpo_step":
            ratio = r["step_s"] / trl[r["device"]] if r["device"] in trl else None
            note = f'gen {r.get("gen_s", float("nan")):.2f}s upd {r.get("update_s", float("nan")):.2f}s' if "gen_s" in r else ""
            out.append({"what": f'GRPO step {r["impl"]}', "value": f'{r["step_s"]:.3f} s',
                        "note": (f"{ratio:.2f}x TRL  " if ratio else "") + note})
        elif b == "engine_update":
            out.append({"what": f'update {r["shape"]} {r["engine"]} x{r["gpus"]}', "value": f'{r["step_s"]:.3f} s',
                        "note": f'{r["tokens_per_s"]:.0f} tok/s resume_ok={r["resume_ok"]} {r["peak_mem_gb"]:.0f} GB'})
        elif b == "vllm":
            out.append({"what": f'vllm {r.get("what", "")}', "value": str(r.get("value", "")), "note": r.get("note", "")})
    print(f"device: {rows[-1]['device']}")
    print(table(out, ["what", "value", "note"]))


if __name__ == "__main__":
    sys.exit(main())
