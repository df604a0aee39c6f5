"""pi-Play top-K + tail distillation divergence: hand cases and the K = V identity."""

import math

import pytest
import torch

from trainer.algos.distill import DIVERGENCES, topk_tail_divergence, topk_tail_logprobs

LN = math.log


def _logits(*probs):
    """[1, len(probs), V] logits whose softmax is exactly the given distributions."""
    return torch.tensor([[list(map(LN, p)) for p in probs]], dtype=torch.float64)


STUDENT = (0.5, 0.3, 0.2)
TEACHER = (0.2, 0.3, 0.5)


def test_it_collapses_everything_outside_the_student_top_k_into_a_tail_bucket():
    # K = 1: the student's top token is 0 -> buckets p = [0.5, 0.5], q = [0.2, 0.8]
    s, t = topk_tail_logprobs(_logits(STUDENT)[0], _logits(TEACHER)[0], k=1)
    torch.testing.assert_close(s.exp(), torch.tensor([[0.5, 0.5]], dtype=torch.float64))
    torch.testing.assert_close(t.exp(), torch.tensor([[0.2, 0.8]], dtype=torch.float64))


@pytest.mark.parametrize(
    "kind, expected",
    [
        # KL(p||q) = 0.5 ln(0.5/0.2) + 0.5 ln(0.5/0.8) = 0.458145 - 0.235002 = 0.223144
        ("reverse_kl", 0.223144),
        # KL(q||p) = 0.2 ln(0.2/0.5) + 0.8 ln(0.8/0.5) = -0.183258 + 0.376003 = 0.192745
        ("forward_kl", 0.192745),
        # m = [0.35, 0.65]; KL(p||m) = 0.5 ln(0.5/0.35) + 0.5 ln(0.5/0.65) = 0.047155
        # KL(q||m) = 0.2 ln(0.2/0.35) + 0.8 ln(0.8/0.65) = 0.054188 ; JS = 0.5 * (sum) = 0.050672
        ("js", 0.050672),
    ],
)
def test_it_computes_the_k1_divergences_by_hand(kind, expected):
    out = topk_tail_divergence(_logits(STUDENT), _logits(TEACHER), k=1, kind=kind)
    assert out.shape == (1, 1)
    assert out.item() == pytest.approx(expected, abs=1e-6)


def test_it_keeps_the_top_k_exact_when_the_tail_is_one_token():
    # K = 2 leaves one token in the tail, so buckets = full distribution:
    # KL = 0.5 ln 2.5 + 0.3 ln 1 + 0.2 ln 0.4 = 0.458145 + 0 - 0.183258 = 0.274887
    out = topk_tail_divergence(_logits(STUDENT), _logits(TEACHER), k=2, kind="reverse_kl")
    assert out.item() == pytest.approx(0.274887, abs=1e-6)


def _full(kind, s_logits, t_logits):
    p, q = s_logits.log_softmax(-1), t_logits.log_softmax(-1)
    kl = lambda a, b: (a.exp() * (a - b)).sum(-1)  # noqa: E731
    if kind == "reverse_kl":
        return kl(p, q)
    if kind == "forward_kl":
        return kl(q, p)
    m = torch.logaddexp(p, q) - LN(2)
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


@pytest.mark.parametrize("kind", sorted(DIVERGENCES))
def test_it_equals_the_full_vocabulary_divergence_when_k_is_the_vocabulary(kind):
    torch.manual_seed(0)
    s = torch.randn(2, 5, 17, dtype=torch.float64) * 3
    t = torch.randn(2, 5, 17, dtype=torch.float64) * 3
    out = topk_tail_divergence(s, t, k=17, kind=kind)
    torch.testing.assert_close(out, _full(kind, s, t), atol=1e-12, rtol=1e-10)
    # k larger than the vocabulary is the same as k = V
    torch.testing.assert_close(topk_tail_divergence(s, t, k=500, kind=kind), out)


def test_it_ranks_by_the_student_not_the_teacher():
    # student top-1 = token 2 (0.6); teacher's top token is 0 but only token 2 is kept:
    # p = [0.6, 0.4], q = [0.1, 0.9] -> KL = 0.6 ln 6 + 0.4 ln(4/9) = 1.075056 - 0.324372 = 0.750684
    out = topk_tail_divergence(_logits((0.1, 0.3, 0.6)), _logits((0.7, 0.2, 0.1)), k=1)
    assert out.item() == pytest.approx(0.750684, abs=1e-6)


def test_it_is_zero_for_identical_distributions():
    torch.manual_seed(1)
    s = torch.randn(2, 4, 30)
    for kind in DIVERGENCES:
        assert topk_tail_divergence(s, s.clone(), k=5, kind=kind).abs().max().item() < 1e-6


def test_it_sends_gradients_to_the_student_only():
    torch.manual_seed(2)
    s = torch.randn(1, 3, 40, requires_grad=True)
    t = torch.randn(1, 3, 40, requires_grad=True)
    topk_tail_divergence(s, t, k=5).sum().backward()
    assert t.grad is None
    assert s.grad is not None and s.grad.abs().sum() > 0 and torch.isfinite(s.grad).all()


def test_it_zeroes_masked_positions():
    torch.manual_seed(3)
    s, t = torch.randn(2, 3, 20), torch.randn(2, 3, 20)
    mask = torch.tensor([[1, 0, 1], [0, 0, 1]])
    out = topk_tail_divergence(s, t, k=4, mask=mask)
    assert (out[mask == 0] == 0).all() and (out[mask == 1] > 0).all()


def test_it_does_not_depend_on_the_chunk_size():
    torch.manual_seed(4)
    s, t = torch.randn(3, 7, 25), torch.randn(3, 7, 25)
    torch.testing.assert_close(
        topk_tail_divergence(s, t, k=6, kind="js", chunk_size=2),
        topk_tail_divergence(s, t, k=6, kind="js"),
    )


def test_it_handles_bfloat16_logits_in_float32():
    torch.manual_seed(5)
    s, t = torch.randn(1, 4, 64), torch.randn(1, 4, 64)
    out = topk_tail_divergence(s.bfloat16(), t.bfloat16(), k=8)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, topk_tail_divergence(s, t, k=8), atol=3e-2, rtol=3e-2)


def test_it_rejects_bad_arguments():
    s = torch.zeros(1, 2, 5)
    with pytest.raises(ValueError, match="choose one of"):
        topk_tail_divergence(s, s, kind="tv")
    with pytest.raises(ValueError, match="aligned"):
        topk_tail_divergence(s, torch.zeros(1, 3, 5))
    with pytest.raises(ValueError, match="at least 1"):
        topk_tail_divergence(s, s, k=0)


def test_it_distils_a_privileged_teacher_into_a_tiny_model(tiny_model_dir, smollm2_tokenizer):
    # Student sees "Q", teacher sees "QCP + Q"; both score the same completion tokens.
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = smollm2_tokenizer
    question = tok("Who built the tower?", add_special_tokens=False).input_ids
    qcp = tok("<search>tower builder</search> Gustave Eiffel's company built it.", add_special_tokens=False).input_ids
    completion = tok(" Gustave Eiffel", add_special_tokens=False).input_ids
    c = len(completion)

    def completion_logits(prefix):  # logits predicting each completion token [1, C, V]
        ids = torch.tensor([prefix + completion])
        return model(input_ids=ids).logits[:, len(prefix) - 1 : -1]

    student = completion_logits(question)
    with torch.no_grad():
        same_context = completion_logits(question)
        teacher = completion_logits(qcp + question)
    assert topk_tail_divergence(student, same_context, k=50).abs().max().item() < 1e-5
    loss = topk_tail_divergence(student, teacher, k=50, mask=torch.ones(1, c))
    assert loss.shape == (1, c) and (loss > 0).all()
    loss.mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
