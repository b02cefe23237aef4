from protos import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_ABORT: _ClassVar[FinishReason]
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_ABORT: FinishReason

class DescribeRouterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RouterInfo(_message.Message):
    __slots__ = ("model", "vocab_size", "max_model_len", "draft_model", "num_speculative_tokens", "speculating", "num_running", "num_waiting", "kv_cache_usage", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position", "rounds_per_k", "chosen_k", "prompt_tokens", "generation_tokens", "finished")
    class FinishedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    DRAFT_MODEL_FIELD_NUMBER: _ClassVar[int]
    NUM_SPECULATIVE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPECULATING_FIELD_NUMBER: _ClassVar[int]
    NUM_RUNNING_FIELD_NUMBER: _ClassVar[int]
    NUM_WAITING_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFTS_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_ACCEPTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_PER_POSITION_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_PER_K_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_K_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    model: str
    vocab_size: int
    max_model_len: int
    draft_model: str
    num_speculative_tokens: int
    speculating: bool
    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: _containers.RepeatedScalarFieldContainer[int]
    rounds_per_k: _containers.RepeatedScalarFieldContainer[int]
    chosen_k: int
    prompt_tokens: int
    generation_tokens: int
    finished: _containers.ScalarMap[str, int]
    def __init__(self, model: _Optional[str] = ..., vocab_size: _Optional[int] = ..., max_model_len: _Optional[int] = ..., draft_model: _Optional[str] = ..., num_speculative_tokens: _Optional[int] = ..., speculating: _Optional[bool] = ..., num_running: _Optional[int] = ..., num_waiting: _Optional[int] = ..., kv_cache_usage: _Optional[float] = ..., num_drafts: _Optional[int] = ..., num_draft_tokens: _Optional[int] = ..., num_accepted_tokens: _Optional[int] = ..., accepted_per_position: _Optional[_Iterable[int]] = ..., rounds_per_k: _Optional[_Iterable[int]] = ..., chosen_k: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., generation_tokens: _Optional[int] = ..., finished: _Optional[_Mapping[str, int]] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "text", "token_ids", "sampling", "max_tokens", "stop", "stop_token_ids", "ignore_eos", "min_tokens", "include_stop_str_in_output", "bad_words")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOP_STR_IN_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    BAD_WORDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    token_ids: TokenIds
    sampling: _common_pb2.SamplingParams
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    ignore_eos: bool
    min_tokens: int
    include_stop_str_in_output: bool
    bad_words: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., token_ids: _Optional[_Union[TokenIds, _Mapping]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: _Optional[bool] = ..., min_tokens: _Optional[int] = ..., include_stop_str_in_output: _Optional[bool] = ..., bad_words: _Optional[_Iterable[str]] = ...) -> None: ...

class SpeculationStats(_message.Message):
    __slots__ = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
    NUM_DRAFTS_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_ACCEPTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    def __init__(self, num_drafts: _Optional[int] = ..., num_draft_tokens: _Optional[int] = ..., num_accepted_tokens: _Optional[int] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("request_id", "token_ids", "text", "finish_reason", "prompt_token_ids", "num_prompt_tokens", "num_completion_tokens", "speculation", "logprobs", "prompt_logprobs", "stop_token_id", "stop_string")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPECULATION_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_STRING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    finish_reason: FinishReason
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    num_prompt_tokens: int
    num_completion_tokens: int
    speculation: SpeculationStats
    logprobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenLogprob]
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenLogprob]
    stop_token_id: int
    stop_string: str
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., num_prompt_tokens: _Optional[int] = ..., num_completion_tokens: _Optional[int] = ..., speculation: _Optional[_Union[SpeculationStats, _Mapping]] = ..., logprobs: _Optional[_Iterable[_Union[_common_pb2.TokenLogprob, _Mapping]]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[_common_pb2.TokenLogprob, _Mapping]]] = ..., stop_token_id: _Optional[int] = ..., stop_string: _Optional[str] = ...) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ("aborted",)
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    aborted: bool
    def __init__(self, aborted: _Optional[bool] = ...) -> None: ...
