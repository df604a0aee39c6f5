"""Command line: ``python -m trainer run CONFIG.yaml [--set key=value ...] [--out DIR] [--resume]``.

Runs one method standalone (``--gpus N``: one process per GPU through torchrun, or
``--launcher deepspeed --hostfile H`` for several machines); metrics, samples and checkpoints go to the run folder (--out,
default $SELFPLAY_DATA_DIR/runs/<method>-<time>) and a progress line per step to stderr.
Bad configs and impossible resumes exit with status 2 and a message saying what to fix.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from trainer.launch import add_launch_arguments, launched, relaunch_if_needed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run a method from a YAML config")
    run_p.add_argument("config", help="YAML config file (see examples/)")
    run_p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key, e.g. --set train.lr=2e-6 (repeatable)")
    run_p.add_argument("--out", default=None, help="run folder (default $SELFPLAY_DATA_DIR/runs/<method>-<time>)")
    run_p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    run_p.add_argument("--control", choices=["random-reward"], default=None,
                       help="run the config's random-reward control: the answering role's reward is a coin flip "
                            "(sets train.control; train.control_p is its probability of 1)")
    add_launch_arguments(run_p)
    gate_p = sub.add_parser("gate", help="screen a task file with the task gate (one JSON verdict per task)")
    from trainer.gate_command import add_arguments as add_gate_arguments

    add_gate_arguments(gate_p)
    fields_p = sub.add_parser("fields", help="print a method's config fields as JSON lines (for forms)")
    fields_p.add_argument("method")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.command == "run" and args.control:
        args.overrides.append(f"train.control={args.control}")
    if args.command == "gate":
        from trainer.gate_command import main as gate_main

        return gate_main(args)
    if args.command == "run":
        code = _launch(args, argv)  # --gpus N > 1: one process per GPU
        if code is not None:
            return code
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if os.environ.get("SELFPLAY_LOG"):  # e.g. SELFPLAY_LOG=info: one line per generate call (rows, steps, captures)
        import logging

        logging.basicConfig(level=os.environ["SELFPLAY_LOG"].upper(), format="%(asctime)s %(name)s %(message)s")

    from trainer.config import ConfigError, load_config, method_fields

    if args.command == "fields":
        try:
            for row in method_fields(args.method):
                print(json.dumps(row))
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            return 2
        return 0
    if args.resume and not args.out:
        print("--resume needs --out DIR: the folder of the run to continue", file=sys.stderr)
        return 2
    from trainer.checkpoint import CheckpointWriteError, ResumeError
    from trainer.data import DataError
    from trainer.models import ModelNotFound
    from trainer.runner import GpuMemoryError, run
    from trainer.sink import ConsoleSink
    from trainer.tools import CorpusError

    try:
        cfg = load_config(args.config, args.overrides)
        result = run(cfg, sink=ConsoleSink(cfg.train.steps), run_dir=args.out, resume=args.resume)
    except (ConfigError, ResumeError, ModelNotFound, DataError, CorpusError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (GpuMemoryError, CheckpointWriteError) as exc:  # the run's own failure, not its input's: what to do
        print(f"error: {exc}", file=sys.stderr)
        return 1
    from trainer.distributed import is_main

    if not is_main():
        return 0
    summary = {"steps": result.steps, "run_dir": result.run_dir, "final_checkpoint": result.final_checkpoint,
               "median_step_seconds": sorted(result.step_seconds)[len(result.step_seconds) // 2]
               if result.step_seconds else None, "stopped": result.stopped}
    print(json.dumps(summary))
    return 0


def _launch(args, argv) -> int | None:
    """Check a multi-GPU config here (a clear message beats N failing children), then run the
    launcher; None when this process should run the method itself."""
    if launched():
        return None
    from trainer.config import ConfigError, load_config
    from trainer.runner import check_multi_rank

    try:
        cfg = load_config(args.config, args.overrides)
    except (ConfigError, OSError):
        return None  # the run below reports it
    args.gpus = args.gpus or cfg.train.gpus
    if args.gpus > 1:
        try:
            check_multi_rank(cfg, args.gpus)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        return relaunch_if_needed(args, argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
