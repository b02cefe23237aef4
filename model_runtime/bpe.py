"""Byte-level BPE tokenizers for the checkpoints specserve makes itself (the
random test checkpoints and the bundled demo pair)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

EOS_TOKEN = "<|endoftext|>"


def train_tokenizer(
    vocab_size: int, corpus: Iterable[str], extra_special_tokens: Sequence[str] = ()
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer of at most ``vocab_size`` tokens.

    Token 0 is the end-of-sequence token (also used for padding); the extra
    special tokens (chat markers, say) follow it.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN, *extra_special_tokens],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        additional_special_tokens=list(extra_special_tokens),
    )
