from protos import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrefillBatch(_message.Message):
    __slots__ = ("batch_id", "sequences")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    sequences: _common_pb2.SequenceBatch
    def __init__(self, batch_id: _Optional[int] = ..., sequences: _Optional[_Union[_common_pb2.SequenceBatch, _Mapping]] = ...) -> None: ...

class PrefillOutput(_message.Message):
    __slots__ = ("seq_id", "status", "token_id", "logprob", "prompt_logprobs")
    SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    seq_id: int
    status: _common_pb2.SequenceStatus
    token_id: int
    logprob: _common_pb2.TokenLogprob
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenLogprob]
    def __init__(self, seq_id: _Optional[int] = ..., status: _Optional[_Union[_common_pb2.SequenceStatus, _Mapping]] = ..., token_id: _Optional[int] = ..., logprob: _Optional[_Union[_common_pb2.TokenLogprob, _Mapping]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[_common_pb2.TokenLogprob, _Mapping]]] = ...) -> None: ...

class PrefillResult(_message.Message):
    __slots__ = ("batch_id", "outputs", "num_free_blocks")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    NUM_FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    outputs: _containers.RepeatedCompositeFieldContainer[PrefillOutput]
    num_free_blocks: int
    def __init__(self, batch_id: _Optional[int] = ..., outputs: _Optional[_Iterable[_Union[PrefillOutput, _Mapping]]] = ..., num_free_blocks: _Optional[int] = ...) -> None: ...

class VerifyBatch(_message.Message):
    __slots__ = ("batch_id", "sequences", "drafts")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    DRAFTS_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    sequences: _common_pb2.SequenceBatch
    drafts: _common_pb2.Drafts
    def __init__(self, batch_id: _Optional[int] = ..., sequences: _Optional[_Union[_common_pb2.SequenceBatch, _Mapping]] = ..., drafts: _Optional[_Union[_common_pb2.Drafts, _Mapping]] = ...) -> None: ...

class VerifyResult(_message.Message):
    __slots__ = ("batch_id", "num_free_blocks", "num_tokens", "token_ids", "num_accepted_drafts", "failed", "logprobs", "num_logprobs")
    class FailedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: _common_pb2.SequenceStatus
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[_common_pb2.SequenceStatus, _Mapping]] = ...) -> None: ...
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_ACCEPTED_DRAFTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    NUM_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    num_free_blocks: int
    num_tokens: _containers.RepeatedScalarFieldContainer[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    num_accepted_drafts: _containers.RepeatedScalarFieldContainer[int]
    failed: _containers.MessageMap[int, _common_pb2.SequenceStatus]
    logprobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenLogprob]
    num_logprobs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, batch_id: _Optional[int] = ..., num_free_blocks: _Optional[int] = ..., num_tokens: _Optional[_Iterable[int]] = ..., token_ids: _Optional[_Iterable[int]] = ..., num_accepted_drafts: _Optional[_Iterable[int]] = ..., failed: _Optional[_Mapping[int, _common_pb2.SequenceStatus]] = ..., logprobs: _Optional[_Iterable[_Union[_common_pb2.TokenLogprob, _Mapping]]] = ..., num_logprobs: _Optional[_Iterable[int]] = ...) -> None: ...
