"""Config: validation reports every problem with its key path, overrides, paper defaults per
method, YAML round trip, form metadata, shipped examples."""
from pathlib import Path

import pytest

from trainer.config import (ConfigError, load_config, method_fields, parse_override, save_config, Config)
from trainer.method_configs import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
GRPO = {"method": "grpo", "data": {"path": "bundled:gsm8k"}}


def test_it_loads_yaml_and_applies_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("method: grpo\ndata: {path: bundled:gsm8k}\ntrain: {lr: 1.0e-6, steps: 3}\n")
    cfg = load_config(path, ["train.lr=2e-6", "model.lora.r=8", "model.lora.target_modules=[q_proj, v_proj]",
                             "rollout.min_new_tokens=4"])
    assert cfg.train.lr == 2e-6 and cfg.train.steps == 3
    assert cfg.model.lora.r == 8 and cfg.model.lora.target_modules == ["q_proj", "v_proj"]
    assert cfg.rollout.min_new_tokens == 4
    assert cfg.model.trust_remote_code is False
    assert cfg.section is cfg.grpo


def test_it_reports_every_problem_with_its_key_path():
    bad = {"method": "grpo", "trian": {}, "train": {"lrr": 1, "steps": 0, "engine": "jax"},
           "model": {"lora": {"r": -1}}, "spice": {}}
    with pytest.raises(ConfigError) as err:
        load_config(bad, ["rollout.min_new_tokens=600", "nonsense"])
    paths = {p for p, _ in err.value.problems}
    assert {"trian", "train.lrr", "train.steps", "train.engine", "model.lora.r", "spice", "data.path",
            "rollout.min_new_tokens", "--set"} <= paths
    messages = dict(err.value.problems)
    assert "did you mean train.lr" in messages["train.lrr"]
    assert "did you mean train" in messages["trian"]
    assert "key.path=value" in messages["--set"]
    assert "train.lrr" in str(err.value)  # the exception text lists them too


def test_unknown_method_and_missing_method():
    with pytest.raises(ConfigError) as err:
        load_config({"method": "ppo"})
    assert err.value.problems[0][0] == "method"
    with pytest.raises(ConfigError) as err:
        load_config({})
    assert ("method", "required key is missing") in err.value.problems


def test_override_into_a_value_is_an_error():
    with pytest.raises(ConfigError) as err:
        load_config(GRPO, ["train.lr.x=1"])
    assert err.value.problems[0][0] == "train.lr"
    assert parse_override("rollout.temperature=0.5") == (["rollout", "temperature"], 0.5)
    assert parse_override("data.path=null") == (["data", "path"], None)


def test_shared_keys_take_the_methods_paper_values():
    ssp = load_config({"method": "ssp"})
    assert (ssp.train.kl_coef, ssp.train.kl_estimator, ssp.train.clip_high) == (0.01, "k3", 0.285)
    assert (ssp.train.warmup_steps, ssp.rollout.group_size, ssp.train.lr) == (5, 5, 1e-6)
    spice = load_config({"method": "spice"})
    assert (spice.train.kl_coef, spice.rollout.group_size, spice.train.prompts_per_step) == (0.0, 8, 128)
    assert spice.spice.invalid_penalty is None and spice.gate.format_penalty == -1.0 and spice.spice.challenger_attempts == 8
    assert load_config({"method": "scope"}).train.kl_coef == 1e-3
    assert load_config({"method": "score"}).train.kl_coef == 0.05
    piplay = load_config({"method": "piplay"})
    assert piplay.train.weight_decay == 0.01 and piplay.piplay.distill_lambdas == [0.03, 0.003, 0.002]
    # the user's value wins over the paper's
    assert load_config({"method": "ssp", "train": {"kl_coef": 0.0}}).train.kl_coef == 0.0


def test_yaml_round_trip(tmp_path):
    cfg = load_config(GRPO, ["train.lr=3e-6", "model.lora.r=4", "grpo.advantage=dr_grpo"])
    path = save_config(cfg, tmp_path / "config.yaml")
    again = load_config(path)
    assert again == cfg
    assert "spice" not in path.read_text()  # only the method's own section is written


def test_every_field_has_a_description():
    def walk(model, prefix):
        for name, field in model.model_fields.items():
            assert field.description, f"{prefix}{name} has no description"
            sub = field.annotation
            for cls in [sub, *getattr(sub, "__args__", ())]:
                if isinstance(cls, type) and hasattr(cls, "model_fields"):
                    walk(cls, f"{prefix}{name}.")
    walk(Config, "")
    for section in SECTIONS.values():
        walk(section, "")


def test_method_fields_describe_the_form():
    rows = {r["path"]: r for r in method_fields("ssp")}
    assert rows["train.kl_coef"]["default"] == 0.01 and rows["train.kl_coef"]["type"] == "float"
    assert rows["train.kl_estimator"]["choices"] == ["k1", "k3"]
    assert rows["rollout.temperature"]["min"] == 0
    assert rows["ssp.judge"]["choices"] == ["frozen_base", "endpoint", "exact"]
    assert "spice.invalid_penalty" not in rows and "method" not in rows
    assert all(r["help"] for r in rows.values())
    with pytest.raises(ConfigError):
        method_fields("nope")


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_examples_validate(path):
    load_config(path)


def test_every_method_section_field_is_read_somewhere():
    """No config key may do nothing: each field of a method section is read by the trainer or the web,
    as an attribute (``sec.top_k``) or by name (``"top_k"``, as the schedule and the forms do)."""
    import ast
    from pathlib import Path

    from trainer.method_configs import SECTIONS

    def reads(tree) -> set[str]:
        """Names read (``x.name`` loaded, or the string "name"), outside validators: a validator checks a field,
        it does not use it, and a field assigned (``x.name = ...``) is not read."""
        out: set[str] = set()

        def visit(node):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    "validator" in ast.unparse(d) for d in node.decorator_list):
                return
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                out.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.add(node.value)
            for child in ast.iter_child_nodes(node):
                visit(child)

        visit(tree)
        return out

    # the rule itself: a validator's read, a store and a description do not count; a property's read does
    probe = reads(ast.parse("class S:\n    only_checked: int = Field(1, description='x')\n"
                            "    @model_validator(mode='after')\n    def _c(self):\n        return self.only_checked\n"
                            "    @property\n    def p(self):\n        self.stored = 1\n        return self.used\n"))
    assert "used" in probe and not {"only_checked", "stored"} & probe

    root = Path(__file__).resolve().parents[2]
    used: set[str] = set()
    for path in [*(root / "trainer").rglob("*.py"), *(root / "apps").rglob("*.py")]:
        used |= reads(ast.parse(path.read_text(encoding="utf-8")))
    unread = [f"{method}.{name}" for method, section in SECTIONS.items() for name in section.model_fields
              if name not in used]
    assert unread == []


def test_two_stage_methods_run_the_papers_iterations_by_default():
    """SCOPE 3 x (20 Challenger + 20 Solver) steps, pi-Play 3 x (50 + 50); a train.steps of your own
    may cut the schedule short, and contradicting an iterations you also set is refused."""
    assert load_config({"method": "scope"}).train.steps == 120
    assert load_config({"method": "piplay"}).train.steps == 300
    assert load_config({"method": "scope", "scope": {"iterations": 2, "solver_steps": 5}}).train.steps == 50
    assert load_config({"method": "piplay", "train": {"steps": 1}}).train.steps == 1
    with pytest.raises(ConfigError) as err:
        load_config({"method": "scope", "train": {"steps": 7}, "scope": {"iterations": 2}})
    assert err.value.problems[0][0] == "scope.iterations" and "80 steps but train.steps is 7" in err.value.problems[0][1]


def test_schedule_places_each_step_in_its_iteration_and_stage():
    from trainer.methods.parts import schedule, schedule_metrics

    assert [schedule(s, 20, 20) for s in (1, 20, 21, 40, 41, 120)] == [
        (0, 0, 0), (0, 0, 19), (0, 1, 0), (0, 1, 19), (1, 0, 0), (2, 1, 19)]
    assert schedule_metrics(61, 50, 50) == {"iteration": 1.0, "stage": 2.0, "stage_step": 11.0}


def test_each_recipe_docstring_ends_with_its_departures_from_the_paper():
    import importlib

    from trainer.methods import METHODS

    for method in METHODS:
        doc = importlib.import_module(f"trainer.methods.{method}").__doc__.rstrip()
        last = doc.split("\n\n")[-1]
        assert last.startswith("Departures from the paper"), method
        items = [line for line in last.splitlines()[1:] if line.startswith("- ")]
        assert len(items) >= 3, method


def test_a_saved_scope_config_with_its_own_train_steps_loads_again(tmp_path):
    """config.yaml holds every value; with train.steps off the schedule it must not also hold iterations
    (the pair is refused), or a checkpoint of `--set train.steps=1` could never be resumed."""
    from trainer.config import save_config

    for method in ("scope", "piplay"):
        cfg = load_config({"method": method, "train": {"steps": 2}})
        again = load_config(save_config(cfg, tmp_path / f"{method}.yaml"))
        assert again.train.steps == 2 and again.section == cfg.section
        planned = load_config({"method": method})
        assert load_config(save_config(planned, tmp_path / "p.yaml")).section.iterations == 3


def test_overlap_off_written_bare_in_yaml_or_set_means_off(tmp_path):
    # YAML 1.1 reads a bare `off` as false; a GPU run given `--set train.overlap=off` was refused as
    # "Input should be 'auto', 'off' or 'one_step' (got False)"
    path = tmp_path / "c.yaml"
    path.write_text("method: grpo\ndata: {path: bundled:gsm8k}\ntrain: {overlap: off}\n")
    assert load_config(path).train.overlap == "off"
    path.write_text("method: grpo\ndata: {path: bundled:gsm8k}\n")
    assert load_config(path, ["train.overlap=off"]).train.overlap == "off"
    assert load_config(path, ["train.overlap=one_step"]).train.overlap == "one_step"
    with pytest.raises(ConfigError, match="train.overlap"):
        load_config(path, ["train.overlap=on"])  # true is not a setting: one_step is
