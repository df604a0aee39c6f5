"""The launch form, built from the trainer's own config description (``trainer.config.method_fields``).

One form field per config leaf: the method's paper defaults prefilled, the field's docs as
help text, bounds and choices from the config class. Field names are the key paths with
``__`` for dots (``cfg__train__lr``) so the trainer's ConfigError paths map back to the field
that shows the error (``add_problems``). Only values the user changed become overrides.

The few fields that decide what a run is and what it costs come first (``FIRST``); the rest,
paper defaults, sit under "advanced". ``prefill`` fills the form from a preset (``PRESETS``:
the CPU smoke test) or from another run's config ("clone this run": ``clone_prefill``).
"""
from __future__ import annotations

import yaml
from django import forms

from apps.corpora.models import Corpus
from apps.runs.sealed import SECRET_PATHS
from apps.runs.services.launch import available_models
from trainer.config import method_fields
from trainer.method_configs import SECTIONS

PREFIX = "cfg__"
HIDDEN_PATHS = {"model.name_or_path", "corpus.path"}  # the top fields / the web's own corpus
SECTION_ORDER = ["train", "rollout", "model", "checkpoint", "data", "", "corpus"]
# The fields shown first (when the method has them); every other one is under "advanced".
FIRST = ["data.path", "reward", "train.steps", "train.prompts_per_step", "rollout.group_size",
         "rollout.max_new_tokens", "train.lr", "train.device", "model.lora.r", "checkpoint.every"]
PRESETS = {
    # A few minutes on 2 CPU cores: does the whole path (model, data, rollout, update, checkpoint) work?
    "cpu-smoke": {
        "label": "CPU smoke test", "queue": "cpu",
        "values": {"train.device": "cpu", "train.steps": 2, "train.prompts_per_step": 1, "rollout.group_size": 2,
                   "rollout.max_new_tokens": 32, "train.micro_batch_size": 2, "checkpoint.every": 1,
                   "spice.challenger_attempts": 2, "spice.challenger_group_size": 2,
                   "spice.max_document_tokens": 256, "spice.format_max_new_tokens": 64},
    },
}
GRPO_DATA = "bundled:gsm8k"  # the prompt set a form of a method that needs one starts with


def field_name(path: str) -> str:
    return PREFIX + path.replace(".", "__")


SECRET_FIELDS = [field_name(p) for p in SECRET_PATHS]  # API keys: password inputs, hidden from error reports


def field_path(name: str) -> str:
    return name[len(PREFIX):].replace("__", ".")


class LaunchForm(forms.Form):
    model = forms.CharField(max_length=500, help_text="A bundled model, a folder of the models directory, or a "
                                                      "path inside it.")
    corpus = forms.ChoiceField(required=False, help_text="The corpus the run reads documents from and searches.")
    queue = forms.ChoiceField(choices=[("", "auto (cpu when train.device is cpu)"), ("gpu", "gpu"), ("cpu", "cpu")],
                              required=False, help_text="Which workers take the run.")
    control = forms.BooleanField(
        required=False, label="also launch a random-reward control",
        help_text="A second run, the same config with train.control: random-reward (the answering role's reward a coin "
                  "flip): a gain counts only above it. The two run pages link each other and show the gain over both.")

    def __init__(self, method: str, *args, prefill: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.method = method
        self.rows = [r for r in method_fields(method) if r["path"] not in HIDDEN_PATHS]
        self.fields["model"].initial = "smollm2-135m-instruct"
        self.models = available_models()  # the catalog: name, params, sizes, installed or how to install
        self.installed_count = sum(m["installed"] for m in self.models)
        names = list(Corpus.objects.order_by("name").values_list("name", flat=True))
        self.fields["corpus"].choices = [("", "— none —")] + [(n, n) for n in names]
        if SECTIONS[method].needs_corpus and names:
            self.fields["corpus"].initial = names[0]
        for row in self.rows:
            self.fields[field_name(row["path"])] = _form_field(row)
        if SECTIONS[method].needs_prompt_set:
            self.fields[field_name("data.path")].initial = GRPO_DATA
        self._prefill(prefill or {})

    def _prefill(self, prefill: dict) -> None:
        """Initial values from a preset or a cloned run: {"model", "corpus", "queue", "values": {path: value}}."""
        for name in ("model", "corpus", "queue"):
            if prefill.get(name) not in (None, ""):
                self.fields[name].initial = prefill[name]
        rows = {row["path"]: row for row in self.rows}
        for path, value in (prefill.get("values") or {}).items():
            if path in rows and path not in SECRET_PATHS and value is not None:
                self.fields[field_name(path)].initial = _initial({**rows[path], "default": value})

    def first_fields(self) -> list:
        """The bound fields shown first (see FIRST), in that order."""
        paths = {row["path"] for row in self.rows}
        return [self[field_name(p)] for p in FIRST if p in paths]

    def advanced_count(self) -> int:
        return sum(len(fields) for _, fields in self.sections())

    def sections(self) -> list[tuple[str, list]]:
        """(section title, bound fields) with the method's own section first."""
        groups: dict[str, list] = {}
        for row in self.rows:
            if row["path"] in FIRST:
                continue
            head = row["path"].split(".")[0] if "." in row["path"] else ""
            groups.setdefault(head, []).append(self[field_name(row["path"])])
        order = [self.method] + SECTION_ORDER
        keys = sorted(groups, key=lambda k: order.index(k) if k in order else len(order))
        return [(k or "general", groups[k]) for k in keys]

    def overrides(self) -> dict:
        """Dotted path -> value for every field the user changed from its default."""
        out = {}
        for row in self.rows:
            value = self.cleaned_data.get(field_name(row["path"]))
            value = typed(row, value)
            if value != row["default"]:
                out[row["path"]] = value
        return out

    def add_problems(self, problems: list[tuple[str, str]]) -> None:
        """Show each (key path, message) next to its field; unknown paths go to the top of the form."""
        for path, message in problems:
            name = {"model.name_or_path": "model", "corpus": "corpus", "queue": "queue",
                    "control": "control"}.get(path, field_name(path))
            if name in self.fields:
                self.add_error(name, message)
            else:
                self.add_error(None, f"{path}: {message}" if path else message)


def preset_prefill(name: str) -> dict:
    preset = PRESETS.get(name)
    return {"queue": preset["queue"], "values": preset["values"]} if preset else {}


def clone_prefill(run) -> dict:
    """The form's values from another run: its model, corpus, queue and every config value."""
    values: dict = {}

    def walk(prefix: str, node):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict):
                walk(path, value)
            else:
                values[path] = value

    walk("", run.config or {})
    return {"model": run.model_name, "corpus": run.corpus_name, "queue": run.queue, "values": values}


def _form_field(row: dict) -> forms.Field:
    common = {"label": row["path"], "help_text": row["help"], "initial": _initial(row), "required": False}
    kind = row["type"]
    if row["path"] in SECRET_PATHS:  # typed, never shown again (not even after a form error)
        return forms.CharField(**common, widget=forms.PasswordInput(attrs={"autocomplete": "off"}))
    if kind == "bool":
        return forms.BooleanField(**common)
    if kind == "choice":
        return forms.ChoiceField(choices=[(str(c), str(c)) for c in row["choices"]], **common)
    if kind == "int":
        return forms.IntegerField(min_value=row["min"], max_value=row["max"], **common)
    if kind == "int_or_choice":  # e.g. train.micro_batch_tokens: auto, or a number
        hint = " or ".join(map(str, row["choices"] or [])) + ", or a whole number"
        return forms.CharField(**common, widget=forms.TextInput(attrs={"placeholder": hint}))
    if kind == "float_or_choice":  # e.g. model.lora.lr: auto, train, or a number
        hint = " or ".join(map(str, row["choices"] or [])) + ", or a number"
        return forms.CharField(**common, widget=forms.TextInput(attrs={"placeholder": hint, "inputmode": "decimal"}))
    if kind == "float":
        return forms.FloatField(**common, widget=forms.TextInput(attrs={"inputmode": "decimal"}))
    if kind == "list":
        return forms.CharField(**common, widget=forms.TextInput(attrs={"placeholder": "comma separated"}))
    return forms.CharField(**common, widget=forms.Textarea(attrs={"rows": 2}) if len(str(row["default"] or "")) > 60
                           else forms.TextInput())


def _initial(row: dict):
    default = row["default"]
    if row["type"] == "list" and isinstance(default, list):
        return ", ".join(map(str, default))
    if row["type"] in ("choice", "int_or_choice", "float_or_choice"):
        return str(default)
    return default


def typed(row: dict, value):
    """Form value -> the config value type (choices keep their int/str type, empty -> default/None)."""
    kind = row["type"]
    if kind == "choice":
        if value in (None, ""):  # a choice left out of the request keeps its default
            return row["default"]
        for choice in row["choices"]:
            if str(choice) == value:
                return choice
        return value
    if kind == "int_or_choice":  # a choice, else a number; anything else goes to the config's own check
        text = str(value if value is not None else "").strip()
        if not text:
            return row["default"]
        if text in map(str, row["choices"] or []):
            return text
        return int(text) if text.lstrip("-").isdecimal() else text
    if kind == "float_or_choice":  # a choice, else a number; anything else goes to the config's own check
        text = str(value if value is not None else "").strip()
        if not text:
            return row["default"]
        if text in map(str, row["choices"] or []):
            return text
        try:
            return float(text)
        except ValueError:
            return text
    if kind == "list":
        text = (value or "").strip()
        if row["choices"] and text in map(str, row["choices"]):
            return text
        if text.startswith("["):
            try:
                return yaml.safe_load(text)
            except yaml.YAMLError:
                return text
        return [part.strip() for part in text.split(",") if part.strip()]
    if kind == "bool":
        return bool(value)
    if value in (None, ""):
        if kind in ("int", "float") or row["default"] is None:
            return row["default"]  # an emptied number keeps its default; an optional text stays unset
        return ""
    return value
