"""The retry loop's mechanics (trainer/methods/retry.py): rounds until done, the cap, the token budget."""
import pytest

from trainer.methods.retry import RetryLimits, draw_until


class Drawer:
    """Each item becomes done after ``needed[i]`` attempts; every attempt generates ``cost`` tokens."""

    def __init__(self, needed, cost):
        self.needed, self.cost, self.drawn, self.calls = needed, cost, [0] * len(needed), []

    def draw(self, items, round_):
        self.calls.append((list(items), round_))
        for i in items:
            self.drawn[i] += 8
        return 8 * self.cost * len(items)

    def done(self, i):
        return self.drawn[i] >= self.needed[i]


def test_rounds_go_on_per_item_until_it_is_done():
    d = Drawer(needed=[8, 24, 16], cost=10)
    report = draw_until(3, d.draw, d.done, RetryLimits(per_round=8, cap=1024, token_budget=10**9, worst_tokens=100))
    assert d.calls == [([0, 1, 2], 0), ([1, 2], 1), ([1], 2)]
    assert report.attempts == [8, 24, 16] and report.rounds == 3 and report.short == []
    assert report.tokens == 8 * 10 * (3 + 2 + 1) and report.stopped_by == "done"
    m = report.metrics(valid=3)
    assert m["attempts"] == 48 and m["attempts_per_valid_task"] == 16 and m["documents_short"] == 0


def test_the_cap_ends_an_item_that_never_succeeds_at_the_papers_1024():
    d = Drawer(needed=[10**9], cost=1)
    report = draw_until(1, d.draw, d.done, RetryLimits(per_round=8, cap=1024, token_budget=10**9, worst_tokens=1))
    assert report.attempts == [1024] and report.rounds == 128  # 1024 / 8
    assert report.short == [0] and report.stopped_by == "cap" and "attempts_per_valid_task" not in report.metrics(0)


def test_the_budget_is_checked_at_the_worst_case_and_pays_whole_rounds_in_order():
    # worst case 8 x 100 = 800 tokens a round and item; round 0 used 8 x 25 x 3 = 600 of 3 x 800 = 2400,
    # so 1800 left pays two more item-rounds (items 0 and 1), then 1800 - 400 = 1400 pays one (item 0)
    d = Drawer(needed=[10**9] * 3, cost=25)
    report = draw_until(3, d.draw, d.done, RetryLimits(per_round=8, cap=1024, token_budget=2400, worst_tokens=100))
    assert d.calls[:3] == [([0, 1, 2], 0), ([0, 1], 1), ([0], 2)]
    assert report.tokens <= 2400 and report.stopped_by == "budget" and report.short == [0, 1, 2]
    assert report.tokens + 800 > 2400  # no further round would have fit


def test_the_first_round_runs_even_over_budget():
    d = Drawer(needed=[16], cost=100)
    report = draw_until(1, d.draw, d.done, RetryLimits(per_round=8, cap=64, token_budget=1, worst_tokens=100))
    assert report.rounds == 1 and report.attempts == [8] and report.stopped_by == "budget"


def test_a_cap_below_one_round_is_refused():
    with pytest.raises(ValueError, match="per_round <= cap"):
        draw_until(1, lambda items, r: 0, lambda i: False, RetryLimits(8, 4, 100, 1))
