"""Adaptive k: each round drafts as many tokens as pay for themselves, from
the acceptance and the step costs measured so far."""

from __future__ import annotations

from pathlib import Path

import pytest

from model_runtime.random_checkpoint import save_random_checkpoint
from router.adaptive import CONSTRAINED, GREEDY, SAMPLED, AdaptiveConfig, KChooser
from specserve import LLM, SamplingParams

NEVER_PROBE = AdaptiveConfig(probe_every=10**9)


def measured(
    acceptance: float, draft_s: float, verify_s: dict[int, float], k_max: int = 5
) -> KChooser:
    """A chooser that has seen rounds at every k, with step times by tokens."""
    chooser = KChooser(k_max, NEVER_PROBE)
    for tokens, seconds in verify_s.items():
        chooser.target_step_s.add(tokens, seconds)
    for batch in (1, 64):
        chooser.draft_step_s.add(batch, draft_s)
    for j in range(k_max):
        chooser.reached[j], chooser.accepted[j] = 100.0, 100.0 * acceptance
    return chooser


def test_before_measuring_anything_it_drafts_the_most() -> None:
    assert KChooser(5).choose(batch=1) == 5


def test_expected_tokens_follow_the_acceptance_per_position() -> None:
    chooser = KChooser(3)
    for j, rate in enumerate([0.5, 0.5, 0.5]):
        chooser.reached[j], chooser.accepted[j] = 10.0, 10.0 * rate
    assert chooser.expected_tokens(3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert chooser.expected_tokens(0) == 1.0


def test_positions_never_reached_borrow_the_last_measured_rate() -> None:
    chooser = KChooser(4)
    chooser.reached[0], chooser.accepted[0] = 10.0, 8.0
    assert chooser.expected_tokens(3) == pytest.approx(1 + 0.8 + 0.64 + 0.512)


def test_drafts_that_are_never_accepted_are_not_drafted() -> None:
    chooser = measured(0.0, draft_s=0.001, verify_s={1: 0.005, 6: 0.005})
    assert chooser.best(batch=1) == 0


def test_cheap_drafts_that_are_accepted_are_drafted_to_the_limit() -> None:
    chooser = measured(0.95, draft_s=0.0002, verify_s={1: 0.005, 6: 0.005})
    assert chooser.best(batch=1) == 5


def test_a_large_batch_whose_verify_grows_with_k_drafts_fewer() -> None:
    # At batch 1 a verify costs a decode step; at batch 64 every draft token
    # adds to it, as when the target's step becomes compute-bound.
    verify = {1: 0.005, 2: 0.005, 4: 0.005, 8: 0.005, 64: 0.006}
    verify.update({128: 0.009, 256: 0.015, 512: 0.027})
    chooser = measured(0.6, draft_s=0.0008, verify_s=verify)
    assert chooser.best(batch=1) > chooser.best(batch=64)


def test_the_engines_own_work_per_round_favours_longer_rounds() -> None:
    # Work the engine does once a round, whatever k, is paid less often per
    # token by rounds that gain more tokens.
    chooser = measured(0.6, draft_s=0.0008, verify_s={1: 0.005, 8: 0.005})
    lean = chooser.best(batch=1)
    for _ in range(3):
        chooser.observe_between(batch=1, seconds=0.02)
    assert chooser.best(batch=1) > lean


def test_acceptance_is_counted_up_to_the_first_rejection() -> None:
    chooser = KChooser(4)
    chooser.observe_acceptance(4, accepted=2)  # drafts 1, 2 passed, 3 failed, 4 unseen
    assert chooser.reached == [1.0, 1.0, 1.0, 0.0]
    assert chooser.accepted == [1.0, 1.0, 0.0, 0.0]


def test_acceptance_is_kept_apart_by_kind_of_sequence() -> None:
    chooser = KChooser(3)
    for _ in range(20):
        chooser.observe_acceptance(3, accepted=3, kind=GREEDY)
        chooser.observe_acceptance(3, accepted=0, kind=SAMPLED)
    assert chooser.expected_tokens(3, {GREEDY: 1}) == pytest.approx(4.0)
    assert chooser.expected_tokens(3, {SAMPLED: 1}) == pytest.approx(1.0)
    assert chooser.expected_tokens(3, {GREEDY: 1, SAMPLED: 3}) == pytest.approx(1.75)


def test_a_greedy_batch_is_not_held_back_by_sampled_requests_served_beside_it() -> None:
    chooser = measured(0.5, draft_s=0.0008, verify_s={1: 0.005, 8: 0.005})
    for _ in range(50):
        chooser.observe_acceptance(5, accepted=5, kind=GREEDY)
        for _ in range(3):  # more sampled requests than greedy ones
            chooser.observe_acceptance(5, accepted=0, kind=SAMPLED)
    assert chooser.best(batch=1, mix={GREEDY: 1}) == 5
    assert chooser.best(batch=1, mix={SAMPLED: 1}) == 0
    assert chooser.choose(batch=1, kinds=[GREEDY, GREEDY]) == 5
    assert chooser.best(batch=1) < 5  # pooled, as before kinds were told apart


def test_a_kind_not_seen_yet_borrows_the_pooled_acceptance() -> None:
    chooser = KChooser(2)
    chooser.observe_acceptance(2, accepted=1, kind=GREEDY)
    assert chooser.expected_tokens(2, {CONSTRAINED: 1}) == chooser.expected_tokens(2)


def test_each_sequence_counts_its_drafts_in_its_own_kind() -> None:
    llm = make_llm(adaptive_k=True)
    greedy = SamplingParams(temperature=0, max_tokens=16)
    sampled = SamplingParams(temperature=1.0, max_tokens=16)
    llm.generate(["def f(x):", "class A:"], [greedy, sampled], use_tqdm=False)
    chooser = llm.engine.rounds.chooser
    assert chooser is not None and set(chooser.by_kind) == {GREEDY, SAMPLED}
    assert all(acceptance.measured for acceptance in chooser.by_kind.values())


def test_probes_try_one_token_more_and_one_fewer_by_turns() -> None:
    chooser = measured(0.6, draft_s=0.0008, verify_s={1: 0.005, 4: 0.005})
    chooser.config = AdaptiveConfig(probe_every=4)
    best = chooser.best(batch=1)
    assert 0 < best < 5
    picks = [chooser.choose(batch=1) for _ in range(8)]
    assert picks == [best, best, best, best + 1, best, best, best, best - 1]


def test_a_pinned_k_is_drafted_every_round_until_unpinned() -> None:
    chooser = measured(0.0, draft_s=0.001, verify_s={1: 0.005})
    chooser.pin(4)
    assert [chooser.choose(batch=1) for _ in range(40)] == [4] * 40
    chooser.pin(None)
    assert chooser.choose(batch=1) == 0
    with pytest.raises(ValueError, match=r"k must be in 0\.\.5"):
        chooser.pin(6)


def test_one_slow_round_does_not_move_the_step_cost() -> None:
    chooser = KChooser(3)
    for seconds in (0.005, 0.005, 0.9, 0.005):  # the third compiled a kernel
        chooser.observe_round(batch=1, k=0, draft_s=0.0, verify_s=seconds)
    assert chooser.target_step_s.get(1) == 0.005


def test_a_round_that_also_caught_the_draft_up_does_not_price_its_steps() -> None:
    chooser = KChooser(3)
    chooser.observe_round(batch=1, k=3, draft_s=None, verify_s=0.005)  # a prompt's prefill too
    assert chooser.draft_step_s.get(1) is None
    chooser.observe_round(batch=1, k=3, draft_s=0.003, verify_s=0.005)
    assert chooser.draft_step_s.get(1) == pytest.approx(0.001)


def test_the_config_is_checked() -> None:
    with pytest.raises(ValueError, match="probe_every must be >= 1"):
        AdaptiveConfig(probe_every=0)
    with pytest.raises(ValueError, match="decay must be in"):
        AdaptiveConfig(decay=1.0)
    with pytest.raises(ValueError, match="window must be >= 1"):
        AdaptiveConfig(window=0)


def make_llm(adaptive_k: bool) -> LLM:
    spec = {"model": "specserve/demo-draft", "num_speculative_tokens": 3, "adaptive_k": adaptive_k}
    return LLM("specserve/demo-target", dtype="float32", max_model_len=256, speculative_config=spec)


def test_pinned_k_drafts_the_configured_number_every_round() -> None:
    llm = make_llm(adaptive_k=False)
    llm.generate(["def f(x):"], SamplingParams(temperature=0, max_tokens=24), use_tqdm=False)
    metrics = llm.speculation_stats()
    rounds = metrics["rounds_per_k"]
    assert rounds[:3] == [0, 0, 0] and rounds[3] > 0
    assert metrics["chosen_k"] == 3


def test_adaptive_k_reports_the_k_of_every_round_and_keeps_greedy_output() -> None:
    params = SamplingParams(temperature=0, max_tokens=24)
    pinned = make_llm(adaptive_k=False).generate(["def f(x):"], params, use_tqdm=False)
    llm = make_llm(adaptive_k=True)
    adaptive = llm.generate(["def f(x):"], params, use_tqdm=False)
    assert adaptive[0].outputs[0].token_ids == pinned[0].outputs[0].token_ids
    metrics = llm.speculation_stats()
    assert len(metrics["rounds_per_k"]) == 4 and sum(metrics["rounds_per_k"]) > 0
    assert 0 <= metrics["chosen_k"] <= 3


def test_a_seeded_sampling_request_keeps_the_configured_k() -> None:
    llm = make_llm(adaptive_k=True)
    llm.engine.rounds.chooser.best = lambda batch: 0  # type: ignore[union-attr, method-assign]
    params = SamplingParams(temperature=0.8, seed=7, max_tokens=16)
    llm.generate(["def f(x):"], params, use_tqdm=False)
    rounds = llm.speculation_stats()["rounds_per_k"]
    assert rounds[0] == 0 and rounds[3] > 0


def test_the_rounds_per_k_cross_the_routers_wire() -> None:
    from router.metrics import EngineStats, SpeculationMetrics
    from router.wire import router_info, stats_from_info

    metrics = SpeculationMetrics(3, rounds_per_k=[4, 0, 2, 9], chosen_k=2)
    stats = EngineStats(True, 1, 0, 0.5, metrics)
    back = stats_from_info(router_info("m", 10, 64, "d", 3, stats)).speculation
    assert back.rounds_per_k == [4, 0, 2, 9] and back.chosen_k == 2


def test_a_draft_that_is_never_accepted_is_mostly_not_run(tmp_path: Path) -> None:
    # Two random models: the draft (another seed) guesses the target's tokens
    # about never, so every draft token costs time and gains nothing.
    target = save_random_checkpoint(tmp_path / "target", seed=0)
    draft = save_random_checkpoint(tmp_path / "draft", seed=1)
    spec = {"model": str(draft), "num_speculative_tokens": 4}
    llm = LLM(str(target), dtype="float32", max_model_len=256, speculative_config=spec)
    params = SamplingParams(temperature=0, max_tokens=96, ignore_eos=True)
    llm.generate([{"prompt_token_ids": [5, 6, 7, 8]}], params, use_tqdm=False)
    rounds = llm.speculation_stats()["rounds_per_k"]
    assert isinstance(rounds, list)
    assert rounds[0] > sum(rounds) / 2  # after the first rounds, only probes draft


def test_a_round_that_prefilled_a_drafted_sequence_is_not_a_draft_steps_price() -> None:
    from types import SimpleNamespace

    from model_runtime.sampling import SamplingOptions
    from router.metrics import SpeculationMetrics
    from router.rounds import Rounds

    def seq(seq_id: int, lacks: int) -> SimpleNamespace:
        return SimpleNamespace(
            seq_id=seq_id,
            num_tokens=70,
            draft_cached=70 - lacks,
            options=SamplingOptions(),
            acceptance_kind=GREEDY,
        )

    chooser = KChooser(3, AdaptiveConfig(time_every=1))  # every round timed
    chooser.pin(3)

    def propose(seqs: list, k: int) -> dict:
        return {s.seq_id: ([1] * k, None, None) for s in seqs}

    drafter = SimpleNamespace(
        k=3, send=lambda seqs, k: (seqs, k), receive=lambda plan, seqs: propose(*plan)
    )
    verifier = SimpleNamespace(prepare=lambda seqs: [], send=lambda prepared, drafts: [])
    rounds = Rounds(drafter, verifier, SpeculationMetrics(3), chooser, overlap=False)  # type: ignore[arg-type]
    rounds.run([seq(1, lacks=1), seq(2, lacks=64)])  # sequence 2's prompt was prefilled too
    assert chooser.draft_step_s.get(2) is None and chooser.target_step_s.get(8) is not None
    rounds.run([seq(1, lacks=1), seq(2, lacks=2)])
    assert chooser.draft_step_s.get(2) is not None


def test_the_engines_work_between_rounds_is_timed_unless_it_prefilled_or_requeued() -> None:
    from types import SimpleNamespace

    from model_runtime.sampling import SamplingOptions
    from router.metrics import SpeculationMetrics
    from router.rounds import Rounds

    def seq(seq_id: int) -> SimpleNamespace:
        return SimpleNamespace(
            seq_id=seq_id,
            num_tokens=70,
            draft_cached=69,
            options=SamplingOptions(),
            acceptance_kind=GREEDY,
        )

    chooser = KChooser(3)
    drafter = SimpleNamespace(k=3, send=lambda seqs, k: None, receive=lambda plan, seqs: {})
    verifier = SimpleNamespace(prepare=lambda seqs: [], send=lambda prepared, drafts: [])
    rounds = Rounds(drafter, verifier, SpeculationMetrics(3), chooser, overlap=False)  # type: ignore[arg-type]
    rounds.run([seq(1), seq(2)])
    rounds.skip_gap()  # the engine prefilled sequence 3 (the engine calls it then)
    rounds.run([seq(1), seq(2), seq(3)])
    assert chooser.between_s.get(2) is None
    rounds.run([seq(1), seq(3)])  # sequence 2 finished: only the engine's own work between
    assert chooser.between_s.get(3) is not None


def test_an_engine_that_prefills_between_rounds_does_not_time_that_gap() -> None:
    llm = make_llm(adaptive_k=True)
    rounds = llm.engine.rounds
    skipped: list[bool] = []
    skip = rounds.skip_gap
    rounds.skip_gap = lambda: skipped.append(True) or skip()  # type: ignore[method-assign]
    llm.generate(["def f(x):"], SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    assert skipped  # the prompt's prefill
