"""Model names resolve as the contract says; the bundled GGUF imports into a trainable
checkpoint; LoRA and full fine-tunes keep the frozen base the right way."""
import json
import shutil

import pytest
import torch

from trainer.config import load_config
from trainer.models import ModelNotFound, load_policy, needs_frozen_base, resolve_model


def test_the_bundled_model_imports_as_a_trainable_float_checkpoint(smollm2_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert (smollm2_dir / "model.safetensors").is_file() and (smollm2_dir / "tokenizer.json").is_file()
    # resolve_model finds the import under $SELFPLAY_DATA_DIR/models/ and does not redo it
    monkeypatch.setenv("SELFPLAY_DATA_DIR", str(smollm2_dir.parent.parent))
    assert resolve_model("smollm2-135m-instruct") == smollm2_dir
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    assert model.dtype == torch.float32 and not getattr(model, "is_quantized", False)
    # it trains: one SGD step on a short text lowers its loss
    ids = torch.tensor([[1, 504, 3458, 282, 4649, 314, 7042, 30]])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    before = model(input_ids=ids, labels=ids).loss
    before.backward()
    opt.step()
    with torch.no_grad():
        after = model(input_ids=ids, labels=ids).loss
    assert torch.isfinite(before) and after < before


def test_a_folder_under_the_models_dir_resolves_by_name(data_dir, tiny_model_dir):
    shutil.copytree(tiny_model_dir, data_dir / "models" / "my-model")
    assert resolve_model("my-model") == data_dir / "models" / "my-model"


def test_absolute_paths_obey_allowed_dirs(tiny_model_dir, tmp_path):
    assert resolve_model(str(tiny_model_dir)) == tiny_model_dir.resolve()
    assert resolve_model(str(tiny_model_dir), allowed_dirs=[tiny_model_dir.parent]) == tiny_model_dir.resolve()
    with pytest.raises(ModelNotFound, match="outside the allowed model directories"):
        resolve_model(str(tiny_model_dir), allowed_dirs=[tmp_path / "models"])
    with pytest.raises(ModelNotFound, match="no config.json"):
        resolve_model(str(tmp_path))


def test_a_hugging_face_id_resolves_through_the_local_cache_only(tiny_model_dir, tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    snap = cache / "models--acme--tiny-chat" / "snapshots" / "0123abcd"
    shutil.copytree(tiny_model_dir, snap)
    (cache / "models--acme--tiny-chat" / "refs").mkdir()
    (cache / "models--acme--tiny-chat" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert resolve_model("acme/tiny-chat") == snap
    with pytest.raises(ModelNotFound, match="not in the local Hugging Face cache"):
        resolve_model("acme/not-downloaded")


def test_unknown_names_say_what_was_tried(data_dir):
    with pytest.raises(ModelNotFound, match="not a bundled name"):
        resolve_model("no-such-model")
    with pytest.raises(ModelNotFound, match="empty"):
        resolve_model(" ")


def test_lora_base_is_the_adapter_disabled_model(tiny_config):
    cfg = load_config(tiny_config(model={"lora": {"r": 4, "alpha": 8}}, train={"kl_coef": 0.1}))
    policy = load_policy(cfg)
    ids = torch.tensor([[1, 2, 3, 4]])
    base_logits = policy.reference_logits(ids, torch.ones_like(ids))
    trainable = policy.trainable_parameters()
    assert trainable and all("lora" in n for n, p in policy.model.named_parameters() if p.requires_grad)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.5)
        changed = policy.model(input_ids=ids).logits
    torch.testing.assert_close(policy.reference_logits(ids, torch.ones_like(ids)), base_logits)
    assert not torch.allclose(changed, base_logits)


def test_full_fine_tune_keeps_a_frozen_copy_only_when_needed(tiny_config):
    plain = load_policy(load_config(tiny_config()))
    assert plain.ref_model is None and not plain.has_frozen
    with pytest.raises(RuntimeError, match="no frozen base"):
        with plain.frozen():
            pass
    cfg = load_config(tiny_config(train={"kl_coef": 0.01}))
    assert needs_frozen_base(cfg)
    policy = load_policy(cfg)
    assert policy.ref_model is not None
    assert not any(p.requires_grad for p in policy.ref_model.parameters())
    assert policy.ref_model.model.embed_tokens.weight.data_ptr() != policy.model.model.embed_tokens.weight.data_ptr()
    assert needs_frozen_base(load_config({"method": "scope"}))  # judge role
