from protos import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrefillRequest(_message.Message):
    __slots__ = ("tokens", "sampling")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    tokens: _common_pb2.SequenceTokens
    sampling: _common_pb2.SamplingParams
    def __init__(self, tokens: _Optional[_Union[_common_pb2.SequenceTokens, _Mapping]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ...) -> None: ...

class PrefillBatch(_message.Message):
    __slots__ = ("batch_id", "sequences")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    sequences: _containers.RepeatedCompositeFieldContainer[PrefillRequest]
    def __init__(self, batch_id: _Optional[int] = ..., sequences: _Optional[_Iterable[_Union[PrefillRequest, _Mapping]]] = ...) -> None: ...

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

class VerifyRequest(_message.Message):
    __slots__ = ("tokens", "sampling", "draft_token_ids", "draft_probs", "packed_probs")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    DRAFT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_PROBS_FIELD_NUMBER: _ClassVar[int]
    PACKED_PROBS_FIELD_NUMBER: _ClassVar[int]
    tokens: _common_pb2.SequenceTokens
    sampling: _common_pb2.SamplingParams
    draft_token_ids: _containers.RepeatedScalarFieldContainer[int]
    draft_probs: _containers.RepeatedCompositeFieldContainer[_common_pb2.SparseDistribution]
    packed_probs: _common_pb2.PackedDistributions
    def __init__(self, tokens: _Optional[_Union[_common_pb2.SequenceTokens, _Mapping]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., draft_token_ids: _Optional[_Iterable[int]] = ..., draft_probs: _Optional[_Iterable[_Union[_common_pb2.SparseDistribution, _Mapping]]] = ..., packed_probs: _Optional[_Union[_common_pb2.PackedDistributions, _Mapping]] = ...) -> None: ...

class VerifyBatch(_message.Message):
    __slots__ = ("batch_id", "sequences", "packed_probs")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    PACKED_PROBS_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    sequences: _containers.RepeatedCompositeFieldContainer[VerifyRequest]
    packed_probs: _common_pb2.PackedDistributions
    def __init__(self, batch_id: _Optional[int] = ..., sequences: _Optional[_Iterable[_Union[VerifyRequest, _Mapping]]] = ..., packed_probs: _Optional[_Union[_common_pb2.PackedDistributions, _Mapping]] = ...) -> None: ...

class VerifyOutput(_message.Message):
    __slots__ = ("seq_id", "status", "token_ids", "num_accepted_drafts", "logprobs")
    SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_ACCEPTED_DRAFTS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    seq_id: int
    status: _common_pb2.SequenceStatus
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    num_accepted_drafts: int
    logprobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenLogprob]
    def __init__(self, seq_id: _Optional[int] = ..., status: _Optional[_Union[_common_pb2.SequenceStatus, _Mapping]] = ..., token_ids: _Optional[_Iterable[int]] = ..., num_accepted_drafts: _Optional[int] = ..., logprobs: _Optional[_Iterable[_Union[_common_pb2.TokenLogprob, _Mapping]]] = ...) -> None: ...

class VerifyResult(_message.Message):
    __slots__ = ("batch_id", "outputs", "num_free_blocks")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    NUM_FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    outputs: _containers.RepeatedCompositeFieldContainer[VerifyOutput]
    num_free_blocks: int
    def __init__(self, batch_id: _Optional[int] = ..., outputs: _Optional[_Iterable[_Union[VerifyOutput, _Mapping]]] = ..., num_free_blocks: _Optional[int] = ...) -> None: ...
