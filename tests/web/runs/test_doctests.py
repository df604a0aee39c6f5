"""The worked examples in the docstrings of the run page's pure helpers are tests too."""
import doctest

import pytest

from apps.episodes import near_duplicates
from apps.runs import compare, ledger, metrics, models, samples, trajectory
from trainer import verify


@pytest.mark.parametrize("module", [ledger, trajectory, compare, metrics, near_duplicates, models, samples, verify])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_sink_docstring_examples():
    from apps.runs import sink

    result = doctest.testmod(sink)
    assert result.attempted > 0 and result.failed == 0
