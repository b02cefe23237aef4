"""The rejection sampler: exact small cases, the Triton kernels against the
PyTorch reference, and the output distribution against the target's."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

from model_runtime.sampling import RowRandomness, SamplingOptions, SamplingTensors, processed_probs
from target_worker.rejection_sampler import (
    PLACEHOLDER,
    RejectionInputs,
    densify,
    rejection_sample_reference,
    rejection_sample_triton,
)

Sampler = Callable[[RejectionInputs], torch.Tensor]
SAMPLERS = {"reference": rejection_sample_reference, "triton": rejection_sample_triton}


def one_hot_rows(tokens: Sequence[int], vocab: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(tokens), vocab).float()


def inputs_for(
    target_probs: torch.Tensor,
    drafts: Sequence[Sequence[int]],
    draft_probs: torch.Tensor,
    greedy: Sequence[bool],
    uniforms: torch.Tensor | None = None,
    seed: int = 0,
) -> RejectionInputs:
    gen = torch.Generator().manual_seed(seed)
    total = sum(len(d) for d in drafts)
    vocab = target_probs.shape[1]
    return RejectionInputs(
        target_probs=target_probs,
        target_argmax=target_probs.argmax(-1),
        draft_ids=torch.tensor([t for d in drafts for t in d], dtype=torch.int64),
        draft_probs=draft_probs,
        num_drafts=[len(d) for d in drafts],
        is_greedy=torch.tensor(greedy),
        uniforms=uniforms
        if uniforms is not None
        else torch.rand(total, dtype=torch.float64, generator=gen),
        noise=torch.empty(len(drafts), vocab).exponential_(generator=gen),
    )


@pytest.fixture(params=sorted(SAMPLERS))
def sample(request: pytest.FixtureRequest) -> Sampler:
    return SAMPLERS[request.param]


# ------------------------------------------------------------------ exact cases


def test_greedy_perfect_match_gives_every_draft_and_the_bonus(sample: Sampler) -> None:
    target = one_hot_rows([3, 1, 4, 2], vocab=6)  # argmax at 3 drafts and the bonus row
    out = sample(inputs_for(target, [[3, 1, 4]], one_hot_rows([3, 1, 4], 6), [True]))
    assert out.tolist() == [[3, 1, 4, 2]]


def test_greedy_mismatch_at_the_first_position_gives_the_targets_token(sample: Sampler) -> None:
    target = one_hot_rows([3, 1, 4, 2], vocab=6)
    out = sample(inputs_for(target, [[5, 1, 4]], one_hot_rows([5, 1, 4], 6), [True]))
    assert out.tolist() == [[3, PLACEHOLDER, PLACEHOLDER, PLACEHOLDER]]


def test_sequences_with_different_k_including_zero(sample: Sampler) -> None:
    # seq 0: k=2, mismatch at 2nd; seq 1: k=0 (bonus only); seq 2: k=3, all match.
    target = one_hot_rows([1, 2, 0, 5, 4, 4, 4, 3], vocab=6)
    drafts = [[1, 3], [], [4, 4, 4]]
    q = one_hot_rows([1, 3, 4, 4, 4], 6)
    out = sample(inputs_for(target, drafts, q, [True, True, True]))
    assert out.tolist() == [[1, 2, -1, -1], [5, -1, -1, -1], [4, 4, 4, 3]]


def test_random_accepts_a_draft_where_p_is_at_least_q(sample: Sampler) -> None:
    target = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    q = torch.tensor([[0.4, 0.6, 0.0]])  # p(0)/q(0) > 1: always accepted
    uniforms = torch.tensor([0.999], dtype=torch.float64)
    out = sample(inputs_for(target, [[0]], q, [False], uniforms=uniforms))
    assert out.tolist() == [[0, 2]]  # the bonus comes from the one-hot last row


def test_random_rejects_a_draft_the_target_never_makes(sample: Sampler) -> None:
    target = torch.tensor([[0.0, 0.3, 0.7], [1.0, 0.0, 0.0]])
    q = torch.tensor([[1.0, 0.0, 0.0]])
    uniforms = torch.tensor([0.0], dtype=torch.float64)  # even u = 0 rejects p = 0
    out = sample(inputs_for(target, [[0]], q, [False], uniforms=uniforms))
    assert out[0, 0].item() in (1, 2) and out[0, 1].item() == PLACEHOLDER


def test_random_rejects_a_draft_with_zero_draft_probability(sample: Sampler) -> None:
    target = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    q = torch.tensor([[0.0, 1.0, 0.0]])  # the draft token 0 was "impossible" under q
    uniforms = torch.tensor([0.0], dtype=torch.float64)
    out = sample(inputs_for(target, [[0]], q, [False], uniforms=uniforms))
    assert out[0, 1].item() == PLACEHOLDER


def test_greedy_and_random_rows_in_one_batch(sample: Sampler) -> None:
    target = torch.tensor([[0.1, 0.9, 0.0], [0.2, 0.2, 0.6], [0.1, 0.9, 0.0], [0.0, 0.0, 1.0]])
    q = torch.tensor([[0.0, 1.0, 0.0], [0.1, 0.8, 0.1]])
    # seq 0 greedy: draft 1 == argmax, bonus argmax 2. seq 1 random: p(1) >= q(1) -> accept.
    out = sample(inputs_for(target, [[1], [1]], q, [True, False]))
    assert out.tolist() == [[1, 2], [1, 2]]


def test_draft_tokens_outside_the_targets_vocabulary_are_rejected(sample: Sampler) -> None:
    target = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    q = densify(torch.tensor([[2, 0]]), torch.tensor([[0.75, 0.25]]), vocab_size=2)
    assert q.tolist() == [[0.25, 0.0]]
    out = sample(
        inputs_for(target, [[2]], q, [False], uniforms=torch.zeros(1, dtype=torch.float64))
    )
    assert out[0, 0].item() in (0, 1) and out[0, 1].item() == PLACEHOLDER


# ----------------------------------------------------- kernels against reference


@pytest.mark.parametrize("vocab", [37, 1000, 3001])
@pytest.mark.parametrize("sparse", [True, False])
def test_triton_kernels_equal_the_reference_on_random_inputs(vocab: int, sparse: bool) -> None:
    gen = torch.Generator().manual_seed(vocab + sparse)
    batch = 12
    num_drafts = [int(k) for k in torch.randint(0, 9, (batch,), generator=gen)]
    num_drafts[:2] = [1, 8]
    rows = sum(num_drafts) + batch
    # p and q close enough that both acceptance and rejection happen.
    base = torch.randn(rows, vocab, generator=gen) * 2
    target = torch.softmax(base, -1)
    draft_rows = [
        r
        for b, k in enumerate(num_drafts)
        for r in range(sum(num_drafts[:b]) + b, sum(num_drafts[:b]) + b + k)
    ]
    q = torch.softmax(base[draft_rows] + torch.randn(len(draft_rows), vocab, generator=gen), -1)
    if sparse:  # top-8 renormalised, as the draft worker ships it
        top, ids = q.topk(8, dim=-1)
        q = densify(ids, top / top.sum(-1, keepdim=True), vocab)
    drafts_flat = torch.multinomial(q, 1, generator=gen).squeeze(1).tolist()
    drafts, start = [], 0
    for k in num_drafts:
        drafts.append(drafts_flat[start : start + k])
        start += k
    greedy = [bool(x) for x in torch.rand(batch, generator=gen) < 0.3]
    inputs = inputs_for(target, drafts, q, greedy, seed=vocab)
    assert torch.equal(rejection_sample_triton(inputs), rejection_sample_reference(inputs))


# ------------------------------------------------------------------ statistics


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """P-value of observed counts under probs (cells with probability 0 must be empty)."""
    assert counts[probs == 0].sum() == 0, "sampled a token of probability 0"
    n = counts.sum()
    expected = probs[probs > 0] * n
    stat = ((counts[probs > 0] - expected) ** 2 / expected).sum()
    dof = int((probs > 0).sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2), stat / 2))


@pytest.mark.parametrize(
    "options",
    [
        SamplingOptions(temperature=1.0),
        SamplingOptions(temperature=0.8, top_k=4),
        SamplingOptions(temperature=1.2, top_p=0.7),
        SamplingOptions(temperature=1.0, min_p=0.1),
    ],
    ids=["plain", "top_k", "top_p", "min_p"],
)
def test_every_output_position_follows_the_targets_distribution(options: SamplingOptions) -> None:
    # One context-free target p and a deliberately wrong draft q at every
    # position, so every output token should be distributed as p.
    vocab, k, n = 10, 3, 20000
    gen = torch.Generator().manual_seed(7)
    target_logits = torch.randn(vocab, generator=gen) * 1.5
    # Wrong (the test below shows it), but overlapping the target enough that
    # later positions are reached.
    draft_logits = 0.6 * target_logits + torch.randn(vocab, generator=gen)
    params = SamplingTensors.build([options], [1], vocab, torch.device("cpu"))
    p = processed_probs(target_logits[None], params)[0]
    q = processed_probs(draft_logits[None], params)[0]
    drafts = torch.multinomial(q, n * k, replacement=True, generator=gen).view(n, k)
    randomness = RowRandomness(torch.device("cpu"), seed=3)
    inputs = RejectionInputs(
        target_probs=p.expand(n * (k + 1), vocab),
        target_argmax=p.argmax().expand(n * (k + 1)),
        draft_ids=drafts.flatten(),
        draft_probs=q.expand(n * k, vocab),
        num_drafts=[k] * n,
        is_greedy=torch.zeros(n, dtype=torch.bool),
        uniforms=randomness.uniform([(None, 0, n * k)], "accept"),
        noise=torch.empty(n, vocab).exponential_(generator=gen),
    )
    out = rejection_sample_reference(inputs)
    for position in range(k + 1):
        tokens = out[:, position]
        tokens = tokens[tokens != PLACEHOLDER]
        assert len(tokens) > 1000, f"position {position} reached only {len(tokens)} times"
        counts = torch.bincount(tokens, minlength=vocab).double()
        assert chi_square_p_value(counts, p.double()) > 1e-3, position
    # The test has power: a 2% shift of probability between two tokens fails it.
    shifted = p.double().clone()
    top = shifted.argsort(descending=True)
    shifted[top[0]] -= 0.02
    shifted[top[1]] += 0.02
    first = torch.bincount(out[:, 0], minlength=vocab).double()
    assert chi_square_p_value(first, shifted) < 1e-3


def test_seeded_draws_do_not_depend_on_the_neighbours() -> None:
    randomness = RowRandomness(torch.device("cpu"), seed=0)
    alone = randomness.uniform([(42, 17, 5)], "accept")
    crowded = randomness.uniform([(None, 3, 4), (42, 17, 5), (7, 17, 5)], "accept")
    assert torch.equal(crowded[4:9], alone)
    again = RowRandomness(torch.device("cpu"), seed=99).uniform([(42, 17, 5)], "accept")
    assert torch.equal(again, alone)
    assert not torch.equal(randomness.uniform([(42, 18, 5)], "accept"), alone)
    noise = randomness.exponential([(None, 0), (42, 17)], 50, "sample")
    assert torch.equal(noise[1], randomness.exponential([(42, 17)], 50, "sample")[0])
