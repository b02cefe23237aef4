from protos import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProposeRequest(_message.Message):
    __slots__ = ("tokens", "sampling")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    tokens: _common_pb2.SequenceTokens
    sampling: _common_pb2.SamplingParams
    def __init__(self, tokens: _Optional[_Union[_common_pb2.SequenceTokens, _Mapping]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ...) -> None: ...

class ProposeBatch(_message.Message):
    __slots__ = ("batch_id", "num_draft_tokens", "sequences")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    num_draft_tokens: int
    sequences: _containers.RepeatedCompositeFieldContainer[ProposeRequest]
    def __init__(self, batch_id: _Optional[int] = ..., num_draft_tokens: _Optional[int] = ..., sequences: _Optional[_Iterable[_Union[ProposeRequest, _Mapping]]] = ...) -> None: ...

class Proposal(_message.Message):
    __slots__ = ("seq_id", "status", "token_ids", "draft_probs", "packed_probs")
    SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_PROBS_FIELD_NUMBER: _ClassVar[int]
    PACKED_PROBS_FIELD_NUMBER: _ClassVar[int]
    seq_id: int
    status: _common_pb2.SequenceStatus
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    draft_probs: _containers.RepeatedCompositeFieldContainer[_common_pb2.SparseDistribution]
    packed_probs: _common_pb2.PackedDistributions
    def __init__(self, seq_id: _Optional[int] = ..., status: _Optional[_Union[_common_pb2.SequenceStatus, _Mapping]] = ..., token_ids: _Optional[_Iterable[int]] = ..., draft_probs: _Optional[_Iterable[_Union[_common_pb2.SparseDistribution, _Mapping]]] = ..., packed_probs: _Optional[_Union[_common_pb2.PackedDistributions, _Mapping]] = ...) -> None: ...

class ProposeResult(_message.Message):
    __slots__ = ("batch_id", "proposals", "num_free_blocks", "packed_probs")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    PROPOSALS_FIELD_NUMBER: _ClassVar[int]
    NUM_FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    PACKED_PROBS_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    proposals: _containers.RepeatedCompositeFieldContainer[Proposal]
    num_free_blocks: int
    packed_probs: _common_pb2.PackedDistributions
    def __init__(self, batch_id: _Optional[int] = ..., proposals: _Optional[_Iterable[_Union[Proposal, _Mapping]]] = ..., num_free_blocks: _Optional[int] = ..., packed_probs: _Optional[_Union[_common_pb2.PackedDistributions, _Mapping]] = ...) -> None: ...
