"""Offline staging of a bundled model's GGUF onto an air-gapped GPU node, in parts, with a checksum.

The node accepts at most 64 MiB per transfer, the working tree included, and the Qwen GGUFs are 0.5-1.1 GB, so the
file travels in parts, one folder per transfer, into /tmp of the node (kept there while the node stays up), and is
joined and imported there.

``split`` sizes the parts to what the working tree leaves of 64 MiB (less a 2 MiB margin), measured when it runs:
moving large files that the node does not need out of the tree before splitting (session_learn.sh's header: the
example runs and plotly) makes the parts larger and fewer; keep them out until the last part has been copied.

On the dev machine (repository root)::

    python benchmarks/gpu/stage_gguf.py split qwen2.5-coder-0.5b-instruct  # -> .gpu_assets/stage/<name>/p01 ... pNN
    # prints how many calls it takes; benchmarks/gpu/stage/<name>.json gets sha256, size and part sizes.
    # Several models can be split side by side (each in its own folder, part files named after the model).

On the GPU node (each call carries the next .gpu_assets/stage/<name>/pNN, or one part of each of two models)::

    python3 benchmarks/gpu/stage_gguf.py collect                 # copies the carried part(s) into /tmp/gguf_parts
    python3 benchmarks/gpu/stage_gguf.py join qwen2.5-coder-0.5b-instruct --dest /tmp/models/qwen2.5-coder-0.5b-instruct

``join`` checks every part's size, the whole file's size and sha256, then imports the GGUF with the product's
``trainer.models.import_gguf`` (the ``gguf`` wheel must be installed: benchmarks/gpu/stage_wheels.sh).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
STAGE = ROOT / ".gpu_assets" / "stage"
MANIFESTS = ROOT / "benchmarks" / "gpu" / "stage"
PARTS = Path("/tmp/gguf_parts")
MIB = 1 << 20


def gguf_source(name: str) -> tuple[list[Path], int]:
    """The installed part files of bundled model ``name`` (the catalog, trainer.models.BUNDLED; one file for
    SmolLM2), in order, sizes checked, and the joined GGUF's size."""
    from trainer.models import BUNDLED, part_files

    parts = part_files(BUNDLED[name])
    return parts, sum(p.stat().st_size for p in parts)


CALL_MIB = 64  # what one call to the GPU node may carry: the working tree plus the carried paths


def tree_mib() -> float:
    """MiB of the working tree a call sends (tracked files present on disk; untracked ones not ignored travel too)."""
    import subprocess

    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    return sum((ROOT / n.decode()).stat().st_size for n in names if n and (ROOT / n.decode()).is_file()) / MIB


def part_mib(margin: float = 2.0) -> int:
    """The largest part (whole MiB) that fits one call beside the working tree as it is now."""
    return int(CALL_MIB - tree_mib() - margin)


def cmd_split(args) -> None:
    if args.mib is None:
        args.mib = part_mib()
    if args.first_mib is None:
        args.first_mib = max(8, args.mib - 13)  # the first part rides with the wheels (~7 MiB) and the JSONL assets
    if args.file:
        sources, total = [Path(args.file)], Path(args.file).stat().st_size
    else:
        sources, total = gguf_source(args.name)
    stage = STAGE / args.name
    shutil.rmtree(stage, ignore_errors=True)
    sizes = [args.first_mib * MIB] + [args.mib * MIB] * (total // (args.mib * MIB) + 1)
    digest, written, index = hashlib.sha256(), [], 0
    out = None
    left = 0

    def next_part():
        nonlocal out, left, index
        if out is not None:
            out.close()
        index += 1
        folder = stage / f"p{index:02d}"
        folder.mkdir(parents=True)
        path = folder / f"{args.name}.part{index:02d}"
        written.append(path)
        left = sizes[index - 1]
        out = path.open("wb")

    next_part()
    for src in sources:
        with src.open("rb") as f:
            while chunk := f.read(4 * MIB):
                digest.update(chunk)
                while chunk:
                    if left == 0:
                        next_part()
                    piece, chunk = chunk[:left], chunk[left:]
                    out.write(piece)
                    left -= len(piece)
    out.close()
    manifest = {"name": args.name, "bytes": total, "sha256": digest.hexdigest(),
                "parts": [[p.name, p.stat().st_size] for p in written]}
    MANIFESTS.mkdir(parents=True, exist_ok=True)
    (MANIFESTS / f"{args.name}.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{args.name}: {total / MIB:.1f} MiB in {len(written)} parts (.gpu_assets/stage/{args.name}/p01 .. "
          f"p{len(written):02d}), "
          f"sha256 {manifest['sha256'][:16]}...; carry one folder per call")


def cmd_collect(args) -> None:
    PARTS.mkdir(parents=True, exist_ok=True)
    found = sorted(STAGE.glob("*/p*/*.part*"))
    for part in found:
        shutil.copy(part, PARTS / part.name)
    have = sorted(p.name for p in PARTS.iterdir())
    print(f"collect: carried {[p.name for p in found]}; /tmp/gguf_parts holds {len(have)}: {have[0] if have else ''}"
          f" .. {have[-1] if have else ''}")


def cmd_join(args) -> None:
    from trainer.models import import_gguf

    manifest = json.loads((MANIFESTS / f"{args.name}.json").read_text())
    dest = Path(args.dest)
    if (dest / "config.json").is_file():
        print(f"join: {dest} already imported")
        return
    missing = [n for n, size in manifest["parts"] if not (PARTS / n).is_file() or (PARTS / n).stat().st_size != size]
    if missing:
        raise SystemExit(f"join: parts missing or of the wrong size: {missing}; carry those folders first")
    gguf = Path("/tmp") / f"{args.name}.gguf"
    digest = hashlib.sha256()
    with gguf.open("wb") as out:
        for n, _ in manifest["parts"]:
            with (PARTS / n).open("rb") as f:
                while chunk := f.read(16 * MIB):
                    digest.update(chunk)
                    out.write(chunk)
    if digest.hexdigest() != manifest["sha256"] or gguf.stat().st_size != manifest["bytes"]:
        raise SystemExit(f"join: checksum mismatch ({digest.hexdigest()} != {manifest['sha256']}); re-carry the parts")
    import time

    t0 = time.time()
    import_gguf(gguf, dest)
    print(f"join: sha256 ok, imported to {dest} in {time.time() - t0:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("split")
    p.add_argument("name")
    p.add_argument("--first-mib", type=int, help="the first part travels with the wheels: smaller (default "
                   "--mib - 13)")
    p.add_argument("--mib", type=int, help="part size (default: 64 MiB less the working tree and 2 MiB)")
    p.add_argument("--file", help="a GGUF file to split instead of the bundled model's installed parts")
    sub.add_parser("collect")
    p = sub.add_parser("join")
    p.add_argument("name")
    p.add_argument("--dest", required=True)
    args = parser.parse_args()
    {"split": cmd_split, "collect": cmd_collect, "join": cmd_join}[args.cmd](args)


if __name__ == "__main__":
    main()
