"""Adaptive k in the engine: the k of each round, reported and kept where
it must be, and what the rounds time for the chooser."""

from __future__ import annotations

from pathlib import Path

from model_runtime.random_checkpoint import save_random_checkpoint
from router.acceptance import GREEDY, SAMPLED
from router.adaptive import AdaptiveConfig, KChooser
from specserve import LLM, SamplingParams


def make_llm(adaptive_k: bool) -> LLM:
    spec = {"model": "specserve/demo-draft", "num_speculative_tokens": 3, "adaptive_k": adaptive_k}
    return LLM("specserve/demo-target", dtype="float32", max_model_len=256, speculative_config=spec)


def test_each_sequence_counts_its_drafts_in_its_own_kind() -> None:
    llm = make_llm(adaptive_k=True)
    greedy = SamplingParams(temperature=0, max_tokens=16)
    sampled = SamplingParams(temperature=1.0, max_tokens=16)
    llm.generate(["def f(x):", "class A:"], [greedy, sampled], use_tqdm=False)
    chooser = llm.engine.rounds.chooser
    assert chooser is not None and set(chooser.acceptance.by_kind) == {GREEDY, SAMPLED}
    assert all(acceptance.measured for acceptance in chooser.acceptance.by_kind.values())


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
    from router.drafting import Drafts
    from router.metrics import SpeculationMetrics
    from router.rounds import Rounds

    def seq(seq_id: int, lacks: int) -> SimpleNamespace:
        return SimpleNamespace(
            seq_id=seq_id,
            num_tokens=70,
            draft_cached=70 - lacks,
            options=SamplingOptions(),
            acceptance_kind=GREEDY,
            room=100,
        )

    chooser = KChooser(3, AdaptiveConfig(time_every=1))  # every round timed
    chooser.pin(3)

    def propose(seqs: list, k: int) -> dict:
        return {s.seq_id: ([1] * k, None, None) for s in seqs}

    drafter = SimpleNamespace(
        k=3, send=lambda seqs, k: (seqs, k), receive=lambda plan, seqs: Drafts.of(propose(*plan))
    )
    verifier = SimpleNamespace(
        prepare=lambda seqs, note_next=False: [], send=lambda prepared, drafts: []
    )
    rounds = Rounds(drafter, verifier, SpeculationMetrics(3), chooser, overlap=False)  # type: ignore[arg-type]
    rounds.run([seq(1, lacks=1), seq(2, lacks=64)])  # sequence 2's prompt was prefilled too
    assert chooser.draft_step_s.get(2) is None and chooser.target_step_s.get(8) is not None
    rounds.run([seq(1, lacks=1), seq(2, lacks=2)])
    assert chooser.draft_step_s.get(2) is not None


def test_the_engines_work_between_rounds_is_timed_unless_it_prefilled_or_requeued() -> None:
    from types import SimpleNamespace

    from model_runtime.sampling import SamplingOptions
    from router.drafting import Drafts
    from router.metrics import SpeculationMetrics
    from router.rounds import Rounds

    def seq(seq_id: int) -> SimpleNamespace:
        return SimpleNamespace(
            seq_id=seq_id,
            num_tokens=70,
            draft_cached=69,
            options=SamplingOptions(),
            acceptance_kind=GREEDY,
            room=100,
        )

    chooser = KChooser(3)
    drafter = SimpleNamespace(k=3, send=lambda seqs, k: None, receive=lambda plan, seqs: Drafts())
    verifier = SimpleNamespace(
        prepare=lambda seqs, note_next=False: [], send=lambda prepared, drafts: []
    )
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


def whole_rounds(chooser: KChooser) -> list[int]:
    """The k of every round the engine measures whole for ``chooser``, from now on."""
    ks: list[int] = []
    observe = chooser.observe_whole
    chooser.observe_whole = lambda batch, k, seconds, round_number: (  # type: ignore[method-assign]
        ks.append(k) or observe(batch, k, seconds, round_number)
    )
    return ks


def test_every_round_drafted_ahead_is_measured_whole_probes_included() -> None:
    # A probe measures what its k gains, and what a whole round of it costs.
    llm = make_llm(adaptive_k=True)
    chooser = KChooser(3, AdaptiveConfig(probe_every=2, time_every=1000, time_first=1))
    chooser.best = lambda batch, mix=None: 2  # type: ignore[method-assign]
    llm.engine.rounds.chooser = chooser
    whole = whole_rounds(chooser)
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    llm.generate(["def f(x):", "class A:"], params, use_tqdm=False)
    rounds = llm.speculation_stats()["rounds_per_k"]
    assert isinstance(rounds, list) and rounds[1] > 0 and rounds[3] > 0  # both probes ran
    assert whole.count(1) == rounds[1] and whole.count(3) == rounds[3]
    assert whole.count(2) == rounds[2] - 1  # the first round is timed: drafted on its path


def test_a_round_whose_draft_caught_up_is_not_measured_whole() -> None:
    # Up from k = 0 the draft first catches up on the tokens it missed.
    llm = make_llm(adaptive_k=True)
    chooser = KChooser(3, AdaptiveConfig(probe_every=2, time_every=1000, time_first=1))
    chooser.best = lambda batch, mix=None: 0  # type: ignore[method-assign]
    llm.engine.rounds.chooser = chooser
    whole = whole_rounds(chooser)
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    llm.generate(["def f(x):"], params, use_tqdm=False)
    rounds = llm.speculation_stats()["rounds_per_k"]
    assert isinstance(rounds, list) and rounds[1] > 0  # probes up from 0 ran
    timed = [r for r in range(1, sum(rounds) + 1) if chooser.timed(r)]  # probes up, round 1
    assert whole.count(1) == 0 and whole.count(0) == sum(rounds) - len(timed)


def test_settled_at_k_0_a_probe_up_prices_the_verify_it_runs() -> None:
    llm = make_llm(adaptive_k=True)
    config = AdaptiveConfig(probe_every=2, time_every=1000, time_first=1, window=100)
    chooser = KChooser(3, config)
    chooser.best = lambda batch, mix=None: 0  # type: ignore[method-assign]
    llm.engine.rounds.chooser = chooser
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    llm.generate(["def f(x):"], params, use_tqdm=False)
    rounds = llm.speculation_stats()["rounds_per_k"]
    assert isinstance(rounds, list) and rounds[1] > 1
    assert chooser.target_step_s.count(2) == rounds[1]  # a token and its one draft


def test_a_timed_round_is_not_measured_whole() -> None:
    # It drafts on its own path (nothing sent ahead), so it costs more than its k does.
    llm = make_llm(adaptive_k=True)
    chooser = KChooser(3, AdaptiveConfig(probe_every=10**9, time_every=3, time_first=1))
    chooser.best = lambda batch, mix=None: 2  # type: ignore[method-assign]
    llm.engine.rounds.chooser = chooser
    whole = whole_rounds(chooser)
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    llm.generate(["def f(x):"], params, use_tqdm=False)
    rounds = llm.speculation_stats()["rounds_per_k"]
    assert isinstance(rounds, list) and rounds[2] > 4
    assert rounds[2] + rounds[0] == sum(rounds)  # (k = 0 where 1 token was left)
    timed = [r for r in range(1, rounds[2] + 1) if chooser.timed(r)]
    assert whole.count(2) == rounds[2] - len(timed)


def test_a_whole_round_is_stamped_with_its_own_round_number() -> None:
    # Prices not measured for a while are forgotten by these stamps, so they
    # must count rounds, seeded ones (which the chooser does not choose) too.
    llm = make_llm(adaptive_k=True)
    chooser = KChooser(3, AdaptiveConfig(probe_every=10**9, time_first=1, time_every=1000))
    llm.engine.rounds.chooser = chooser
    stamps: list[int] = []
    observe = chooser.observe_whole
    chooser.observe_whole = lambda batch, k, seconds, round_number: (  # type: ignore[method-assign]
        stamps.append(round_number) or observe(batch, k, seconds, round_number)
    )
    seeded = SamplingParams(temperature=1.0, seed=7, max_tokens=24, ignore_eos=True)
    llm.generate(["def f(x):"], seeded, use_tqdm=False)
    rounds = llm.speculation_stats()["rounds_per_k"]
    assert isinstance(rounds, list) and stamps == list(range(2, sum(rounds) + 1))


def test_a_chooser_set_aside_counts_only_the_rounds_it_served() -> None:
    # Its schedule and what it forgets count in its own rounds, not in those
    # another chooser served meanwhile.
    llm = make_llm(adaptive_k=True)
    first = llm.engine.rounds.chooser
    assert first is not None
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    llm.generate(["def f(x):"], params, use_tqdm=False)
    llm.engine.rounds.chooser = other = KChooser(3)
    llm.generate(["def f(x):"], params, use_tqdm=False)
    llm.engine.rounds.chooser = first
    llm.generate(["def f(x):"], params, use_tqdm=False)
    rounds = llm.speculation_stats()["rounds_per_k"]
    assert isinstance(rounds, list) and other.rounds > 0
    assert first.rounds == sum(rounds) - other.rounds


def test_a_round_whose_drafts_were_sent_ahead_is_not_timed() -> None:
    # Choosing round 5's k (when round 4 sends its drafts) settles at k = 0,
    # after which the schedule would time round 5, a probe up; but its drafts
    # already ran ahead, so reading them back would time nothing.
    llm = make_llm(adaptive_k=True)
    chooser = KChooser(3, AdaptiveConfig(probe_every=4, time_every=1000, time_first=1))
    chooser.best = lambda batch, mix=None: 2 if chooser.rounds < 4 else 0  # type: ignore[method-assign]
    llm.engine.rounds.chooser = chooser
    timed: list[int] = []
    observe = chooser.observe_round
    chooser.observe_round = lambda batch, k, draft_s, verify_s: (  # type: ignore[method-assign]
        timed.append(chooser.rounds) or observe(batch, k, draft_s, verify_s)
    )
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    llm.generate(["def f(x):"], params, use_tqdm=False)
    assert chooser.timed(5) and 5 not in timed and 9 in timed  # 9: no drafts sent ahead
