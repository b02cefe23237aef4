"""With the bundled pair, the first token of a speculation round — an accepted
draft or a recovered token — is distributed exactly as the target's own next
token, computed independently with transformers."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import specserve
from draft_worker.worker import DraftWorker
from model_runtime.grammar import GrammarMatchers, apply_bitmask
from model_runtime.sampling import SamplingOptions
from protos.messages import ProposeRequest, SequenceTokens, VerifyRequest
from router.structured import StructuredOutputsParams
from target_worker.worker import TargetWorker
from tests.conftest import runner_of
from tests.test_rejection_sampler import chi_square_p_value

PROMPT = "def fibonacci(n):\n"
SAMPLES, CHUNK, K = 2500, 500, 3


def transformers_logits(prompt_ids: list[int]) -> torch.Tensor:
    """The target's raw next-token logits [V] after ``prompt_ids``, by transformers."""
    folder = specserve.resolve_model("specserve/demo-target")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([prompt_ids])).logits[0, -1]


def transformers_next_token_probs(options: SamplingOptions, prompt_ids: list[int]) -> torch.Tensor:
    scores = transformers_logits(prompt_ids).unsqueeze(0)
    ids = torch.tensor([prompt_ids])
    scores = TemperatureLogitsWarper(options.temperature)(ids, scores)
    if options.top_k > 0:
        scores = TopKLogitsWarper(options.top_k)(ids, scores)
    if options.top_p < 1:
        scores = TopPLogitsWarper(options.top_p)(ids, scores)
    return torch.softmax(scores, -1)[0].double()


def merged(counts: torch.Tensor, probs: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pool the cells expected fewer than 5 times into one, for the chi-square test."""
    small = probs * n < 5
    return (
        torch.cat([counts[~small], counts[small].sum(0, keepdim=True)]),
        torch.cat([probs[~small], probs[small].sum(0, keepdim=True)]),
    )


@pytest.mark.parametrize(
    "options",
    [SamplingOptions(temperature=0.8, top_p=0.95), SamplingOptions(temperature=1.0, top_k=20)],
    ids=["top_p", "top_k"],
)
def test_first_speculated_token_follows_the_targets_distribution(options: SamplingOptions) -> None:
    prompt_ids = prompt()
    first_tokens_follow(options, prompt_ids, transformers_next_token_probs(options, prompt_ids))


def test_with_a_logit_bias_and_min_tokens_it_follows_the_adjusted_distribution() -> None:
    # The draft proposes from its own unadjusted q; the target adjusts p (bias
    # added, the suppressed token masked at the first position) and rejection
    # sampling must still give exactly the adjusted p.
    prompt_ids = prompt()
    plain = transformers_next_token_probs(SamplingOptions(temperature=0.9), prompt_ids)
    order = plain.argsort(descending=True).tolist()
    bias = ((order[3], 2.5), (order[1], -1.5))
    options = SamplingOptions(
        temperature=0.9, logit_bias=bias, min_tokens_left=1, suppressed_ids=(order[0],)
    )
    logits = plain.log()  # the reference: the same adjustment on the target's own scores
    for token, value in bias:
        logits[token] += value / 0.9  # bias before temperature, as the target applies it
    logits[order[0]] = -torch.inf
    first_tokens_follow(options, prompt_ids, torch.softmax(logits, -1))


def test_with_penalties_and_bad_words_it_follows_the_adjusted_distribution() -> None:
    # Half the prompt stands as output (presence, frequency and bad words see
    # it), all of it for repetition; the draft proposes unpenalised.
    prompt_ids = prompt()
    start = len(prompt_ids) // 2
    logits = transformers_logits(prompt_ids).double()
    seen = torch.zeros_like(logits, dtype=torch.bool)
    seen[prompt_ids] = True
    logits = torch.where(seen, torch.where(logits > 0, logits / 1.4, logits * 1.4), logits)
    counts = torch.bincount(torch.tensor(prompt_ids[start:]), minlength=logits.shape[0])
    logits = logits - 0.4 * counts - 0.3 * (counts > 0)
    order = logits.argsort(descending=True).tolist()
    # A one-token bad word, and a two-token one whose first token ends the output.
    bad_words = ((order[0],), (prompt_ids[-1], order[1]))
    logits[[order[0], order[1]]] = -torch.inf
    options = SamplingOptions(
        temperature=1.0, presence_penalty=0.3, frequency_penalty=0.4,
        repetition_penalty=1.4, output_start=start, bad_words=bad_words,
    )  # fmt: skip
    first_tokens_follow(options, prompt_ids, torch.softmax(logits, -1))


def test_with_a_grammar_it_follows_the_masked_distribution() -> None:
    # The draft proposes under the grammar's mask; the target masks each verify
    # row by the state its drafts reach, and must give exactly the masked p.
    prompt_ids = prompt()
    tokenizer = AutoTokenizer.from_pretrained(specserve.resolve_model("specserve/demo-target"))
    logits = transformers_logits(prompt_ids).double()
    order = logits.argsort(descending=True).tolist()
    words = [w for w in map(tokenizer.decode, ([t] for t in order[:12])) if w.strip().isalnum()]
    grammar = StructuredOutputsParams(choice=[w + ";" for w in words[:4]]).text
    matchers = GrammarMatchers(lambda: tokenizer, logits.shape[0])
    matchers.sync(0, grammar, [])
    allowed = apply_bitmask(
        torch.zeros(1, logits.shape[0]), matchers.masks([(0, [])]), torch.arange(1)
    )
    masked = logits.masked_fill(allowed[0] == -torch.inf, -torch.inf)
    options = SamplingOptions(temperature=1.0, grammar=grammar, output_start=len(prompt_ids))
    first_tokens_follow(options, prompt_ids, torch.softmax(masked, -1))


def prompt() -> list[int]:
    tokenizer = AutoTokenizer.from_pretrained(specserve.resolve_model("specserve/demo-target"))
    return list(tokenizer.encode(PROMPT))


def first_tokens_follow(
    options: SamplingOptions, prompt_ids: list[int], probs: torch.Tensor
) -> None:
    """Sample SAMPLES rounds of K drafts at ``options`` and check the first token
    of each against ``probs`` (chi-square), both paths taken."""
    runners = {
        name: runner_of(
            specserve.resolve_model(name),
            num_blocks=CHUNK,
            block_size=16,
            dtype="float32",
            max_num_seqs=CHUNK,
        )
        for name in ("specserve/demo-target", "specserve/demo-draft")
    }
    target = TargetWorker(runners["specserve/demo-target"], model_name="specserve/demo-target")
    draft = DraftWorker(runners["specserve/demo-draft"], model_name="specserve/demo-draft")
    firsts, accepted = [], 0
    for start in range(0, SAMPLES, CHUNK):
        seqs = range(start, start + CHUNK)
        proposals = draft.propose(
            [ProposeRequest(SequenceTokens(s, 0, prompt_ids), options) for s in seqs], K
        )
        outputs = target.verify(
            [
                VerifyRequest(
                    SequenceTokens(s, 0, prompt_ids),
                    options,
                    p.token_ids,
                    p.draft_ids,
                    p.draft_probs,
                )
                for s, p in zip(seqs, proposals, strict=True)
            ]
        )
        firsts += [o.token_ids[0] for o in outputs]
        accepted += sum(o.num_accepted_drafts > 0 for o in outputs)
        draft.release(list(seqs))
        target.release(list(seqs))
    # Both paths were taken: accepted drafts and recovered tokens.
    assert 0.1 * SAMPLES < accepted < 0.98 * SAMPLES
    counts = torch.bincount(torch.tensor(firsts), minlength=probs.shape[0]).double()
    assert counts[probs == 0].sum() == 0, "sampled a token the target excludes"
    observed, expected = merged(counts, probs, SAMPLES)
    assert chi_square_p_value(observed, expected) > 1e-3


def test_a_greedy_batch_sends_no_q_and_a_mixed_one_the_top_n() -> None:
    runner = runner_of(specserve.resolve_model("specserve/demo-draft"), num_blocks=16)
    draft = DraftWorker(runner)
    greedy_options = SamplingOptions(temperature=0.0)
    (greedy,) = draft.propose([ProposeRequest(SequenceTokens(1, 0, [5, 9, 33]), greedy_options)], 3)
    assert len(greedy.token_ids) == 3
    assert greedy.draft_ids is None and greedy.draft_probs is None  # the target's one-hot
    sampled = ProposeRequest(SequenceTokens(2, 0, [5, 9, 33]), SamplingOptions(temperature=1.0))
    again = ProposeRequest(SequenceTokens(1, 0, [5, 9, 33]), greedy_options)
    mixed = draft.propose([again, sampled], 3)
    assert mixed[0].token_ids == greedy.token_ids  # greedy drafts do not change
    assert mixed[0].draft_ids is not None and mixed[0].draft_ids.shape == (3, draft.top_n)
    assert mixed[0].draft_probs is not None and mixed[0].draft_probs[:, 0].tolist() == [1.0] * 3
