from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "min_p", "seed", "logprobs", "prompt_logprobs", "logit_bias", "min_tokens_left", "suppressed_ids", "presence_penalty", "frequency_penalty", "repetition_penalty", "output_start", "bad_words", "grammar")
    class LogitBiasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    LOGIT_BIAS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_LEFT_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSED_IDS_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_START_FIELD_NUMBER: _ClassVar[int]
    BAD_WORDS_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: int
    logprobs: int
    prompt_logprobs: int
    logit_bias: _containers.ScalarMap[int, float]
    min_tokens_left: int
    suppressed_ids: _containers.RepeatedScalarFieldContainer[int]
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    output_start: int
    bad_words: _containers.RepeatedCompositeFieldContainer[TokenSequence]
    grammar: str
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., seed: _Optional[int] = ..., logprobs: _Optional[int] = ..., prompt_logprobs: _Optional[int] = ..., logit_bias: _Optional[_Mapping[int, float]] = ..., min_tokens_left: _Optional[int] = ..., suppressed_ids: _Optional[_Iterable[int]] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., output_start: _Optional[int] = ..., bad_words: _Optional[_Iterable[_Union[TokenSequence, _Mapping]]] = ..., grammar: _Optional[str] = ...) -> None: ...

class TokenSequence(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class PackedDistributions(_message.Message):
    __slots__ = ("rows", "width", "token_ids", "probs")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PROBS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    width: int
    token_ids: bytes
    probs: bytes
    def __init__(self, rows: _Optional[int] = ..., width: _Optional[int] = ..., token_ids: _Optional[bytes] = ..., probs: _Optional[bytes] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "logprob", "top_token_ids", "top_logprobs", "rank")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    top_token_ids: _containers.RepeatedScalarFieldContainer[int]
    top_logprobs: _containers.RepeatedScalarFieldContainer[float]
    rank: int
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., top_token_ids: _Optional[_Iterable[int]] = ..., top_logprobs: _Optional[_Iterable[float]] = ..., rank: _Optional[int] = ...) -> None: ...

class SequenceStatus(_message.Message):
    __slots__ = ("code", "message")
    class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OK: _ClassVar[SequenceStatus.Code]
        NOT_FOUND: _ClassVar[SequenceStatus.Code]
        INVALID_ARGUMENT: _ClassVar[SequenceStatus.Code]
        RESOURCE_EXHAUSTED: _ClassVar[SequenceStatus.Code]
        INTERNAL: _ClassVar[SequenceStatus.Code]
    OK: SequenceStatus.Code
    NOT_FOUND: SequenceStatus.Code
    INVALID_ARGUMENT: SequenceStatus.Code
    RESOURCE_EXHAUSTED: SequenceStatus.Code
    INTERNAL: SequenceStatus.Code
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: SequenceStatus.Code
    message: str
    def __init__(self, code: _Optional[_Union[SequenceStatus.Code, str]] = ..., message: _Optional[str] = ...) -> None: ...

class SequenceBatch(_message.Message):
    __slots__ = ("seq_ids", "cached_lens", "num_tokens", "token_ids", "samplings", "sampling_index")
    SEQ_IDS_FIELD_NUMBER: _ClassVar[int]
    CACHED_LENS_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLINGS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_INDEX_FIELD_NUMBER: _ClassVar[int]
    seq_ids: _containers.RepeatedScalarFieldContainer[int]
    cached_lens: _containers.RepeatedScalarFieldContainer[int]
    num_tokens: _containers.RepeatedScalarFieldContainer[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    samplings: _containers.RepeatedCompositeFieldContainer[SamplingParams]
    sampling_index: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, seq_ids: _Optional[_Iterable[int]] = ..., cached_lens: _Optional[_Iterable[int]] = ..., num_tokens: _Optional[_Iterable[int]] = ..., token_ids: _Optional[_Iterable[int]] = ..., samplings: _Optional[_Iterable[_Union[SamplingParams, _Mapping]]] = ..., sampling_index: _Optional[_Iterable[int]] = ...) -> None: ...

class Drafts(_message.Message):
    __slots__ = ("num_drafts", "token_ids", "sampled", "probs")
    NUM_DRAFTS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_FIELD_NUMBER: _ClassVar[int]
    PROBS_FIELD_NUMBER: _ClassVar[int]
    num_drafts: _containers.RepeatedScalarFieldContainer[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampled: _containers.RepeatedScalarFieldContainer[int]
    probs: PackedDistributions
    def __init__(self, num_drafts: _Optional[_Iterable[int]] = ..., token_ids: _Optional[_Iterable[int]] = ..., sampled: _Optional[_Iterable[int]] = ..., probs: _Optional[_Union[PackedDistributions, _Mapping]] = ...) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("model", "vocab_size", "max_model_len", "block_size", "num_blocks", "num_free_blocks", "max_num_batched_tokens", "max_num_seqs", "forwards", "wire_version")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    NUM_FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_BATCHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SEQS_FIELD_NUMBER: _ClassVar[int]
    FORWARDS_FIELD_NUMBER: _ClassVar[int]
    WIRE_VERSION_FIELD_NUMBER: _ClassVar[int]
    model: str
    vocab_size: int
    max_model_len: int
    block_size: int
    num_blocks: int
    num_free_blocks: int
    max_num_batched_tokens: int
    max_num_seqs: int
    forwards: ForwardCounts
    wire_version: int
    def __init__(self, model: _Optional[str] = ..., vocab_size: _Optional[int] = ..., max_model_len: _Optional[int] = ..., block_size: _Optional[int] = ..., num_blocks: _Optional[int] = ..., num_free_blocks: _Optional[int] = ..., max_num_batched_tokens: _Optional[int] = ..., max_num_seqs: _Optional[int] = ..., forwards: _Optional[_Union[ForwardCounts, _Mapping]] = ..., wire_version: _Optional[int] = ...) -> None: ...

class ForwardCounts(_message.Message):
    __slots__ = ("replayed", "captured", "capture_s", "eager", "eager_s")
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_S_FIELD_NUMBER: _ClassVar[int]
    EAGER_FIELD_NUMBER: _ClassVar[int]
    EAGER_S_FIELD_NUMBER: _ClassVar[int]
    replayed: int
    captured: int
    capture_s: float
    eager: int
    eager_s: float
    def __init__(self, replayed: _Optional[int] = ..., captured: _Optional[int] = ..., capture_s: _Optional[float] = ..., eager: _Optional[int] = ..., eager_s: _Optional[float] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("seq_ids",)
    SEQ_IDS_FIELD_NUMBER: _ClassVar[int]
    seq_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, seq_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("num_released", "num_free_blocks")
    NUM_RELEASED_FIELD_NUMBER: _ClassVar[int]
    NUM_FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    num_released: int
    num_free_blocks: int
    def __init__(self, num_released: _Optional[int] = ..., num_free_blocks: _Optional[int] = ...) -> None: ...
