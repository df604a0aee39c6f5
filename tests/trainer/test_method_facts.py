"""A method's facts live on its config section (trainer/method_configs.py) and nowhere else.

Adding a method touches its recipe, its section (with its entry in ``SECTIONS``) and, for a run-page
panel, its template. So no other code may decide by a method's name: no ``method == "grpo"``, no
list of method names, no dict keyed by them. The facts themselves are read where they matter.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from trainer.config import Config, ConfigError, load_config
from trainer.method_configs import SECTIONS, MethodSection
from trainer.models import needs_frozen_base
from trainer.runner import check_multi_rank

ROOT = Path(__file__).resolve().parents[2]
NAMES = set(SECTIONS)
# Where a method's name may be written: its own files, and optional extras a panel shows.
ALLOWED = {"trainer/method_configs.py", "apps/runs/method_panel.py:EXTRAS"}


def _names_in(node) -> list[str]:
    if isinstance(node, ast.Constant) and node.value in NAMES:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
            isinstance(e, ast.Constant) and e.value in NAMES for e in node.elts):
        return [e.value for e in node.elts]
    return []


def _mentions_method(node) -> bool:
    return any(isinstance(n, ast.Name) and "method" in n.id or isinstance(n, ast.Attribute) and "method" in n.attr
               for n in ast.walk(node))


def decisions_by_name(tree: ast.AST, where: str) -> list[str]:
    """``method == "x"`` / ``method in ("x", "y")``, a literal list of several method names anywhere,
    and a module-level list, set or dict (keys) of method names."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_in(s) for s in sides) and any(_mentions_method(s) for s in sides):
                found.append(f"{where}:{node.lineno} compares a method's name")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(_names_in(node)) > 1:
            found.append(f"{where}:{node.lineno} lists methods by name")
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            label = f"{where}:{getattr(target, 'id', '?')}"
            value = node.value
            keys = value.keys if isinstance(value, ast.Dict) else []
            named = (isinstance(value, (ast.Tuple, ast.List, ast.Set)) and _names_in(value)) or (
                keys and all(k is not None and _names_in(k) for k in keys))
            if named and label not in ALLOWED:
                found.append(f"{where}:{node.lineno} lists methods by name ({label})")
    return sorted(set(found))


def test_no_code_outside_the_sections_decides_by_a_methods_name():
    found = []
    for package in ("apps", "selfplay_web", "trainer"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "migrations" in path.parts or rel in ALLOWED or rel.startswith("trainer/methods/"):
                continue
            found += decisions_by_name(ast.parse(path.read_text()), rel)
    assert not found, "read the method's facts from its section instead: " + "; ".join(found)


@pytest.mark.parametrize("code", [
    'if cfg.method == "grpo":\n    pass\n',
    'ok = run.method in ("ssp", "score")\n',
    'MULTI = ("ssp", "score")\n',
    'PANELS = {"scope": 1, "score": 2}\n',
    'WITHOUT_CORPUS = {"grpo"}\n',
    'field = ChoiceField(choices=["grpo", "spice"])\n',
])
def test_the_rule_catches_each_form_of_a_name_list(code):
    assert decisions_by_name(ast.parse(code), "x.py")


def test_the_rule_leaves_other_uses_of_the_same_words_alone():
    code = 'if self.proposer_advantage == "grpo":\n    pass\nsection = config.get("spice")\n'
    assert not decisions_by_name(ast.parse(code), "x.py")


def test_every_method_states_its_facts():
    for name, section in SECTIONS.items():
        assert issubclass(section, MethodSection) and section.display_name, name
        assert section.needs_corpus != section.needs_prompt_set, f"{name} trains on a corpus or on a prompt set"
        recipe = (ROOT / "trainer" / "methods" / f"{name}.py").read_text()
        assert all(f'"{role}"' in recipe for role in section.roles), f"{name}'s recipe names its roles"
        assert section.answer_role in (None, *section.roles), name
        assert name in Config.model_fields  # the Config has one field per section, made from SECTIONS


def test_the_facts_decide_what_they_are_for():
    # several updates per rollout: the trainer's own log-probs cannot be the PPO reference
    for name, section in SECTIONS.items():
        if section.multi_update:
            with pytest.raises(ConfigError, match="several optimizer steps"):
                load_config({"method": name, "train": {"old_logprobs": "trainer"}})
        elif section.needs_corpus:
            load_config({"method": name, "train": {"old_logprobs": "trainer"}})
    # a role judged by the frozen base keeps it, even without KL; SSP only with its frozen-base judge
    assert needs_frozen_base(load_config({"method": "scope", "train": {"kl_coef": 0.0}}))
    assert not needs_frozen_base(load_config({"method": "ssp", "train": {"kl_coef": 0.0}, "ssp": {"judge": "exact"}}))
    assert needs_frozen_base(load_config({"method": "ssp", "train": {"kl_coef": 0.0}}))
    # several GPUs only for recipes that shard their step
    with pytest.raises(ConfigError, match="runs on one GPU; --gpus > 1 is supported for grpo, spice"):
        check_multi_rank(load_config({"method": "scope"}), 2)
    with pytest.raises(ConfigError, match="needs a JSONL prompt set"):
        load_config({"method": "grpo"})
