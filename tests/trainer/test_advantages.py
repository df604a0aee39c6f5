"""Advantage estimators against hand-computed values."""

import math

import pytest
import torch

from trainer.algos.advantages import (
    ADVANTAGES,
    EMABaseline,
    dr_grpo,
    ema_baseline,
    get_advantage,
    group_normalized,
    grpo,
    reinforce,
    rloo,
)

close = lambda a, b: torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float32), torch.tensor(b), atol=1e-5, rtol=0)  # noqa: E731


def test_it_normalizes_grpo_by_group_mean_and_sample_std():
    # mean 0.5; deviations +-0.5; sample var = 4 * 0.25 / 3 = 1/3; std = 0.57735
    # advantages = +-0.5 / 0.57735 = +-0.866025
    close(grpo([[1.0, 0.0, 0.0, 1.0]], eps=0.0), [[0.866025, -0.866025, -0.866025, 0.866025]])


def test_it_computes_grpo_per_group_and_zero_for_constant_groups():
    # group 1: mean 2, std sqrt((1 + 0 + 1) / 2) = 1 -> [-1, 0, 1]
    # group 2: all equal -> (r - mean) = 0, std 0 -> 0 / (0 + eps) = 0
    close(grpo([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]), [[-1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])


def test_it_centres_without_std_for_dr_grpo():
    # mean 0.25 -> [0.75, -0.25, -0.25, -0.25]; a 0/1 reward scaled x10 stays x10 (no std)
    close(dr_grpo([[1.0, 0.0, 0.0, 0.0]]), [[0.75, -0.25, -0.25, -0.25]])
    close(dr_grpo([[10.0, 0.0, 0.0, 0.0]]), [[7.5, -2.5, -2.5, -2.5]])


def test_it_passes_raw_rewards_for_reinforce():
    r = torch.tensor([[0.2, 0.8]])
    adv = reinforce(r)
    close(adv, [[0.2, 0.8]])
    adv[0, 0] = 5.0
    assert r[0, 0] == pytest.approx(0.2)  # a copy, not the caller's tensor


def test_it_uses_the_leave_one_out_mean_for_rloo():
    # r = [1, 0, 0, 0]: 1 - mean(0,0,0) = 1;  0 - mean(1,0,0) = -1/3
    # check: G/(G-1) * (r - mean) = 4/3 * 0.75 = 1
    close(rloo([[1.0, 0.0, 0.0, 0.0]]), [[1.0, -1 / 3, -1 / 3, -1 / 3]])


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_it_gives_zero_advantage_to_a_group_of_one(name):
    close(ADVANTAGES[name]([[0.7]]), [[0.0]])


def test_it_accepts_one_group_as_a_flat_list():
    close(dr_grpo([1.0, 0.0]), [[0.5, -0.5]])


def test_it_rejects_a_three_dimensional_reward_tensor():
    with pytest.raises(ValueError, match=r"\[N_groups, G\]"):
        grpo(torch.zeros(2, 2, 2))


def test_it_normalizes_within_arbitrary_groups():
    # hop 1: [1, 0] mean 0.5, std sqrt(0.5) = 0.707107 -> +-0.707107
    # hop 2: [3, 5] mean 4, std sqrt(2) = 1.414214 -> -1/1.414214, +1/1.414214 = -+0.707107
    # hop 3: [1] alone -> 0
    adv = group_normalized([1.0, 0.0, 3.0, 5.0, 1.0], [1, 1, 2, 2, 3], eps=0.0)
    close(adv, [0.707107, -0.707107, -0.707107, 0.707107, 0.0])
    centred = group_normalized([1.0, 0.0, 3.0, 5.0, 1.0], [1, 1, 2, 2, 3], scale=False)
    close(centred, [0.5, -0.5, -1.0, 1.0, 0.0])


def test_it_matches_grpo_when_everything_is_one_group():
    r = [0.1, 0.9, 0.4, 0.4, 1.0]
    close(group_normalized(r, [7] * 5), grpo([r])[0].tolist())


def test_it_normalizes_interleaved_group_ids():
    # group 'a' = positions 0, 2 -> [2, 4]; group 'b' = positions 1, 3 -> [10, 10]
    close(group_normalized([2.0, 10.0, 4.0, 10.0], [0, 1, 0, 1], scale=False), [-1.0, 0.0, 1.0, 0.0])


def test_it_rejects_mismatched_group_ids():
    with pytest.raises(ValueError, match="same length"):
        group_normalized([1.0, 2.0], [0])


def test_it_follows_the_score_ema_baseline():
    # b0 = 0.  R = 1: A = 1 - 0 = 1,      b1 = 0.7 * 0 + 0.3 * 1 = 0.3
    #          R = 1: A = 1 - 0.3 = 0.7,  b2 = 0.7 * 0.3 + 0.3 * 1 = 0.51
    #          R = 0: A = 0 - 0.51,       b3 = 0.7 * 0.51 + 0 = 0.357
    b = EMABaseline()
    assert b.advantage(1.0) == pytest.approx(1.0)
    assert b.value == pytest.approx(0.3)
    assert b.advantage(1.0) == pytest.approx(0.7)
    assert b.advantage(0.0) == pytest.approx(-0.51)
    assert b.value == pytest.approx(0.357)
    assert ema_baseline(0.3, 1.0) == pytest.approx(0.51)


def test_it_restores_the_ema_baseline_from_its_state():
    b = EMABaseline()
    b.advantage(1.0)
    c = EMABaseline()
    c.load_state_dict(b.state_dict())
    assert c.advantage(1.0) == pytest.approx(0.7)


def test_it_looks_estimators_up_by_name():
    assert set(ADVANTAGES) == {"grpo", "dr_grpo", "reinforce", "rloo"}
    assert get_advantage("rloo") is rloo
    with pytest.raises(ValueError, match="choose one of"):
        get_advantage("ppo")


def test_it_keeps_grpo_advantages_zero_mean_and_unit_sample_std():
    torch.manual_seed(0)
    adv = grpo(torch.rand(6, 8), eps=0.0)
    close(adv.mean(dim=1), [0.0] * 6)
    close(adv.std(dim=1), [1.0] * 6)
    assert not math.isnan(float(adv.sum()))
