"""When a sequence stops: EOS, ignore_eos, stop tokens, max_tokens, the context length."""

from __future__ import annotations

from dataclasses import replace

import pytest
from transformers import AutoTokenizer

import specserve
from router.detokenizer import IncrementalDetokenizer
from router.params import SamplingParams
from router.sequence import SequenceState

EOS = 0


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return AutoTokenizer.from_pretrained(specserve.resolve_model("specserve/demo-target"))


def state(tokenizer, params: SamplingParams, max_model_len: int = 100) -> SequenceState:  # type: ignore[no-untyped-def]
    prompt = tokenizer.encode("x = 1\n")
    return SequenceState(
        seq_id=0,
        request_id="r",
        index=0,
        prompt_ids=prompt,
        params=params,
        options=params.options(0),
        detokenizer=IncrementalDetokenizer(tokenizer, prompt),
        eos_token_id=EOS,
        max_model_len=max_model_len,
    )


def test_eos_stops_and_tokens_after_it_are_dropped(tokenizer) -> None:  # type: ignore[no-untyped-def]
    seq = state(tokenizer, SamplingParams(max_tokens=10))
    seq.append([5, 6, EOS, 7, 8])
    assert seq.output_ids == [5, 6, EOS] and seq.finish_reason == "stop"


def test_ignore_eos_keeps_going(tokenizer) -> None:  # type: ignore[no-untyped-def]
    seq = state(tokenizer, SamplingParams(max_tokens=10, ignore_eos=True))
    seq.append([5, EOS, 7])
    assert seq.output_ids == [5, EOS, 7] and not seq.finished


def test_a_stop_token_ends_the_sequence_and_is_kept(tokenizer) -> None:  # type: ignore[no-untyped-def]
    seq = state(tokenizer, SamplingParams(max_tokens=10, stop_token_ids=[6]))
    seq.append([5, 6, 7])
    assert seq.output_ids == [5, 6] and (seq.finish_reason, seq.stop_reason) == ("stop", 6)


def test_max_tokens_cuts_a_round_short(tokenizer) -> None:  # type: ignore[no-untyped-def]
    seq = state(tokenizer, SamplingParams(max_tokens=3))
    seq.append([5, 6, 7, 8, 9])
    assert seq.output_ids == [5, 6, 7] and seq.finish_reason == "length"


def test_the_context_length_stops_with_length(tokenizer) -> None:  # type: ignore[no-untyped-def]
    seq = state(tokenizer, SamplingParams(max_tokens=None), max_model_len=8)
    seq.append(list(range(10, 30)))
    assert seq.num_tokens == 8 and seq.finish_reason == "length"


class WithoutBackend:
    """A tokenizer that only decodes, as one the ``tokenizers`` library does not back."""

    def __init__(self, tokenizer) -> None:  # type: ignore[no-untyped-def]
        self.decode = tokenizer.decode


@pytest.mark.parametrize("backed", [True, False], ids=["streamed", "decoded-in-windows"])
def test_incremental_text_equals_decoding_everything(tokenizer, backed: bool) -> None:  # type: ignore[no-untyped-def]
    text = "def f(x):\n    return 'héllo ✓ wörld'  # naïve\n"
    ids = [*tokenizer.encode(text), tokenizer.eos_token_id, *tokenizer.encode(" 漢字")]
    source = tokenizer if backed else WithoutBackend(tokenizer)
    detok = IncrementalDetokenizer(source, tokenizer.encode("# a\n"))
    pieces = [detok.push(t) for t in ids]
    assert "".join(pieces) == detok.text == tokenizer.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("stop", ["STOP", "ld STOP", "P"])
def test_a_stop_string_spread_over_tokens_cuts_the_text_before_it(tokenizer, stop: str) -> None:  # type: ignore[no-untyped-def]
    seq = state(tokenizer, SamplingParams(stop=["never", stop], max_tokens=None), 200)
    ids = tokenizer.encode("print('hello world STOP and more')")
    for token in ids:  # one at a time: only new text (and a stop's length before it) is searched
        seq.append([token])
        if seq.finished:
            break
    assert seq.finish_reason == "stop" and seq.stop_reason == stop
    full = "print('hello world STOP and more')"
    assert seq.text == full[: full.index(stop)]


def test_the_tokens_from_any_position_are_those_of_the_whole_sequence(tokenizer) -> None:  # type: ignore[no-untyped-def]
    seq = state(tokenizer, SamplingParams(max_tokens=None), 100)
    seq.append([7, 8, 9])
    for start in range(seq.num_tokens + 1):  # in the prompt, at its end, in the output
        assert seq.tokens_from(start) == seq.all_ids[start:]


def byte_fallback_tokenizer():  # type: ignore[no-untyped-def]
    """A Llama-2-style tokenizer: unknown characters fall back to byte tokens."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"<0x{b:02X}>": 3 + b for b in range(256)}
    for piece in ["▁", "a", "▁a", "b", "▁b", "»", "é", "▁é"]:
        vocab[piece] = len(vocab)
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    raw.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
         decoders.Strip(" ", 1, 0)]
    )  # fmt: skip
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def test_a_token_run_the_stream_refuses_goes_on_in_windows_without_an_error() -> None:
    import random

    tokenizer = byte_fallback_tokenizer()
    rng = random.Random(1)
    handed_over = 0
    for _ in range(300):  # random runs: byte tokens split and mixed with pieces
        prompt = [rng.randrange(len(tokenizer)) for _ in range(4)]
        ids = [rng.randrange(len(tokenizer)) for _ in range(10)]
        streamed = IncrementalDetokenizer(tokenizer, prompt)
        windows = IncrementalDetokenizer(WithoutBackend(tokenizer), prompt)
        refused = False
        for token in ids:
            piece = streamed.push(token)  # never raises
            # Once handed over, it decodes exactly as windows alone would.
            assert windows.push(token) == piece or not refused
            refused = streamed._stream is None
        handed_over += refused
    assert handed_over > 0


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=40),
        SamplingParams(max_tokens=40, ignore_eos=True),
        SamplingParams(max_tokens=40, stop_token_ids=[27]),
        SamplingParams(max_tokens=None),
    ],
    ids=["eos", "ignore-eos", "stop-token", "context-length"],
)
def test_a_round_appended_at_once_ends_where_token_by_token_would(tokenizer, params) -> None:  # type: ignore[no-untyped-def]
    import random

    rng = random.Random(3)
    ids = [rng.choice([EOS, 27, *range(100, 400)]) for _ in range(60)]
    # A stop string that never appears makes the reference go token by token.
    token_by_token = replace(params, stop=["\x00never"])
    at_once, one_by_one = state(tokenizer, params, 50), state(tokenizer, token_by_token, 50)
    for start in range(0, len(ids), 5):  # rounds of five tokens
        if not at_once.finished:
            at_once.append(ids[start : start + 5])
    for token in ids:
        if not one_by_one.finished:
            one_by_one.append([token])
    assert at_once.output_ids == one_by_one.output_ids
    assert (at_once.finish_reason, at_once.stop_reason) == (
        one_by_one.finish_reason,
        one_by_one.stop_reason,
    )
    assert at_once.text == one_by_one.text


def test_a_token_run_extended_at_once_decodes_as_pushed_one_by_one() -> None:
    import random

    tokenizer = byte_fallback_tokenizer()  # its streams hand over to windows now and then
    rng = random.Random(2)
    for _ in range(200):
        prompt = [rng.randrange(len(tokenizer)) for _ in range(4)]
        ids = [rng.randrange(len(tokenizer)) for _ in range(12)]
        pushed, extended = (IncrementalDetokenizer(tokenizer, prompt) for _ in range(2))
        expected = "".join(pushed.push(t) for t in ids)
        assert extended.extend(ids[:5]) + extended.extend(ids[5:]) == expected
        assert extended.text == pushed.text
