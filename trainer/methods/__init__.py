"""The method registry: name -> (recipe, config section class).

A recipe is ``def run_<method>(ctx: RecipeContext) -> None`` in ``trainer/methods/<method>.py``
(copy ``grpo.py`` to start a new one). Recipes are imported lazily, on first call, so a
recipe file that is missing or broken only breaks its own method. The section classes
(``trainer/method_configs.py``) are always importable: the web builds forms from them.
"""
from __future__ import annotations

import importlib

from trainer.method_configs import SECTIONS


class LazyRecipe:
    """A recipe function imported from ``module:function`` on first call."""

    def __init__(self, target: str):
        self.target = target
        self._fn = None

    def load(self):
        if self._fn is None:
            module, name = self.target.split(":")
            try:
                self._fn = getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError) as exc:
                raise NotImplementedError(f"recipe {self.target} is not available: {exc}") from exc
        return self._fn

    def __call__(self, ctx):
        return self.load()(ctx)

    def __repr__(self):
        return f"LazyRecipe({self.target!r})"


METHODS: dict[str, tuple[LazyRecipe, type]] = {
    name: (LazyRecipe(f"trainer.methods.{name}:run_{name}"), SECTIONS[name]) for name in SECTIONS
}


def get_recipe(method: str):
    try:
        return METHODS[method][0]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}") from None


__all__ = ["METHODS", "LazyRecipe", "get_recipe"]
