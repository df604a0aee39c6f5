"""The compare view like W&B's (issue 32 item 2): each run's step -> training time / wall time map, seeds of one
config found as groups, the page's axis / smoothing / band controls, and the cross-play heatmap's reading."""
import pytest

from apps.evals.crossplay_reading import reading
from apps.evals.models import CrossPlay
from apps.runs import compare
from apps.runs.models import Metric, Run

pytestmark = pytest.mark.django_db

GRPO = {"seed": 0, "method": "grpo", "train": {"lr": 1e-6, "steps": 10, "time_limit_minutes": 10.0}, "grpo": {"group_size": 8}}


def _run(owner, config=None, name="", tags=(), seconds=(2.0, 3.0, 5.0), wall=None):
    run = Run.objects.create(method="grpo", model_name="tiny", config=config or GRPO, owner=owner, name=name,
                             tags=list(tags), total_steps=3, current_step=3)
    rows = []
    for step, secs in enumerate(seconds, start=1):
        for role in ("policy", "system"):  # every role of a step carries the same seconds
            rows.append(Metric(run=run, step=step, role=role, name="step_seconds", value=secs))
            rows.append(Metric(run=run, step=step, role=role, name="reward_mean", value=0.1 * step))
            if wall is not None:
                rows.append(Metric(run=run, step=step, role=role, name="wall_clock", value=wall[step - 1]))
    Metric.objects.bulk_create(rows)
    return run


def test_training_time_sums_step_seconds_once_per_step_and_wall_time_counts_pauses(researcher):
    # steps of 2, 3, 5 s; a pause of 100 s between step 2 and step 3 shows on the wall clock only
    run = _run(researcher, wall=[1000.0 + 2, 1000.0 + 5, 1000.0 + 110])
    bare = _run(researcher)  # an imported folder from before the wall_clock stamp
    axes = compare.time_axes([run, bare])
    assert axes[run.pk] == {"steps": [1, 2, 3], "train": [2.0, 5.0, 10.0], "wall": [2.0, 5.0, 110.0]}
    assert axes[bare.pk]["train"] == [2.0, 5.0, 10.0] and axes[bare.pk]["wall"] is None


def test_a_long_run_is_strided_to_the_points_asked_keeping_its_last_step(researcher):
    run = _run(researcher, seconds=[1.0] * 50)
    axes = compare.time_axes([run], points=10)[run.pk]
    assert len(axes["steps"]) <= 11 and axes["steps"][0] == 1 and axes["steps"][-1] == 50
    assert axes["train"][-1] == 50.0 and all(t == float(s) for s, t in zip(axes["steps"], axes["train"]))


def test_seeds_of_one_config_group_and_a_different_config_does_not(researcher):
    a = _run(researcher, name="grpo-tta-seed0")
    b = _run(researcher, config={**GRPO, "seed": 1, "train": {**GRPO["train"], "time_limit_minutes": 8.0}},
             name="grpo-tta-seed1")
    other = _run(researcher, config={**GRPO, "train": {**GRPO["train"], "lr": 5e-6}}, name="grpo-lr5e-6")
    groups = compare.seed_groups([a, b, other])
    assert groups == [{"label": "grpo · grpo-tta · seeds 0, 1", "runs": [a.pk, b.pk], "by": "config"}]


def test_a_shared_group_tag_groups_runs_whatever_their_configs(researcher):
    a = _run(researcher, tags=["group:sweep", "gsm8k"])
    b = _run(researcher, config={**GRPO, "train": {**GRPO["train"], "lr": 5e-6}}, tags=["group:sweep"])
    c = _run(researcher, tags=["gsm8k"])  # a shared ordinary tag is not a group; c's config matches a's, but a is taken
    assert compare.seed_groups([a, b, c]) == [{"label": "sweep", "runs": [a.pk, b.pk], "by": "tag"}]


def test_the_compare_page_offers_axes_smoothing_and_bands(client, researcher):
    a = _run(researcher, name="grpo-tta-seed0", wall=[2.0, 5.0, 10.0])
    b = _run(researcher, config={**GRPO, "seed": 1}, name="grpo-tta-seed1")
    client.force_login(researcher)
    html = client.get(f"/runs/compare/?ids={a.pk},{b.pk}&x=train").content.decode()
    assert '<option value="train" selected>training time</option>' in html
    assert 'id="compare-smooth"' in html and 'id="compare-bands" checked' in html and 'id="compare-groups"' in html
    assert 'id="compare-axes"' in html and "wall_clock" not in html.split('id="metric"')[1].split("</select>")[0]
    assert "same config apart from the seed" in html
    html = client.get(f"/runs/compare/?ids={a.pk},{b.pk}&x=nonsense").content.decode()
    assert '<option value="step" selected>step</option>' in html


def test_the_crossplay_reading_says_which_way_each_line_moved():
    text = reading([[0.3, 0.7, 0.9], [0.2, 0.5, 0.8], [0.1, 0.4, 0.85]], ["s1", "s2", "s3"], ["s1", "s2", "s3"])
    assert "Diagonal (each checkpoint on its own tasks) 30% -> 85%, up" in text
    assert "later Solvers on the first tasks 30% -> 90%, up (the Solver got better on fixed tasks)" in text
    assert "the first Solver on later tasks 30% -> 10%, down (the tasks got harder)" in text
    assert "high s3/s3 cell (85%) with a low first-Solver cell on those tasks (10%): the Solver kept pace" in text
    # SPICE seed 1 (a Challenger drifting to MCQs answered A): the latest tasks got easier for the first Solver
    # (7% -> 40%) and the latest Solver passes them 82%: learned, not "kept pace with harder tasks"
    seed1 = reading([[0.07, 0.05], [0.40, 0.82]], ["base", "step 19"], ["base", "step 19"])
    assert "(the tasks got easier)" in seed1 and "kept pace" not in seed1
    assert "no harder for it than the first ones (7%): the latest Solver learned the latest Challenger's tasks" in seed1
    easy = reading([[0.8, 0.8], [0.8, 0.8]], ["a", "b"], ["a", "b"])
    assert "flat" in easy and "the latest tasks are easy, not a sign the Solver learned" in easy
    assert reading([[None, None], [None, None]], ["a", "b"], ["a", "b"]) == ""


def test_the_crossplay_page_shows_its_reading(client, researcher):
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher)
    job = CrossPlay.objects.create(run=run, checkpoints=[{"id": 1, "step": 1, "path": ""}, {"id": 2, "step": 9, "path": ""}],
                                   matrix=[[0.2, 0.6], [0.1, 0.7]], cells_done=4)
    client.force_login(researcher)
    html = client.get(f"/evals/crossplay/{job.pk}/").content.decode()
    assert 'id="crossplay-reading"' in html and "the tasks got harder" in html and "step 9/step 9 cell (70%)" in html


def test_the_run_page_heatmap_has_the_reading_beside_it(client, researcher):
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher)
    CrossPlay.objects.create(run=run, checkpoints=[{"id": 1, "step": 1, "path": ""}, {"id": 2, "step": 9, "path": ""}],
                             matrix=[[0.2, 0.6], [0.1, 0.7]], cells_done=4, status="finished")
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    reading = html.split('id="run-crossplay-reading"', 1)[1].split("</p>", 1)[0]
    assert "the first Solver on later tasks 20% -&gt; 10%, down (the tasks got harder)" in reading


def test_runs_without_a_seeded_config_are_not_grouped(researcher):
    a, b = _run(researcher, config={"method": "grpo"}), _run(researcher, config={"method": "grpo"})
    assert compare.seed_groups([a, b]) == []
