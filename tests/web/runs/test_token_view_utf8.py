"""The token view shows a character whose UTF-8 bytes a byte-level BPE split over tokens whole, on the token that
completes it, instead of one U+FFFD per token (issue 32 item 5), with the real SmolLM2 tokenizer."""
import pytest

from apps.episodes.models import Attempt
from apps.runs import trajectory
from apps.runs.models import Run

TEXT = "Grüße aus Köln: 日本語のテキスト 🙂 ok"


def test_split_characters_are_shown_whole(smollm2_tokenizer):
    ids = smollm2_tokenizer.encode(TEXT, add_special_tokens=False)
    alone = [smollm2_tokenizer.decode([i]) for i in ids]
    assert any("\ufffd" in t for t in alone)  # the tokenizer does split some characters
    decode = lambda t: smollm2_tokenizer.decode(t, skip_special_tokens=False)  # noqa: E731
    tokens = [t for s in trajectory.mask_segments(ids, [1] * len(ids), decode) for t in s["tokens"]]
    assert "".join(t["text"] for t in tokens) == TEXT and not any("\ufffd" in t["text"] for t in tokens)
    joined = [t for t in tokens if t.get("joins")]
    assert joined and all(any(p.get("part_of") == t["id"] for p in tokens) for t in joined)


@pytest.mark.django_db
def test_the_trajectory_page_has_no_replacement_characters(client, researcher, run_env, smollm2_tokenizer):
    ids = smollm2_tokenizer.encode(TEXT, add_special_tokens=False)
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, owner=researcher)
    Attempt.objects.create(run=run, key="1:0:a", task_key="1:0", role="solver", step=1, reward=1.0, text=TEXT,
                           turns=[{"role": "assistant", "text": TEXT}], token_ids=ids, loss_mask=[1] * len(ids))
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/attempts/1:0:a/").content.decode()
    tokens = html.split('<div class="tokens">', 1)[1].split("</div>", 1)[0]
    assert "\ufffd" not in tokens and "日" in tokens and "one character split over tokens" in tokens
