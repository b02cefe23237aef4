from protos import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProposeBatch(_message.Message):
    __slots__ = ("batch_id", "num_draft_tokens", "sequences")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    num_draft_tokens: int
    sequences: _common_pb2.SequenceBatch
    def __init__(self, batch_id: _Optional[int] = ..., num_draft_tokens: _Optional[int] = ..., sequences: _Optional[_Union[_common_pb2.SequenceBatch, _Mapping]] = ...) -> None: ...

class ProposeResult(_message.Message):
    __slots__ = ("batch_id", "num_free_blocks", "drafts", "failed")
    class FailedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: _common_pb2.SequenceStatus
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[_common_pb2.SequenceStatus, _Mapping]] = ...) -> None: ...
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DRAFTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    num_free_blocks: int
    drafts: _common_pb2.Drafts
    failed: _containers.MessageMap[int, _common_pb2.SequenceStatus]
    def __init__(self, batch_id: _Optional[int] = ..., num_free_blocks: _Optional[int] = ..., drafts: _Optional[_Union[_common_pb2.Drafts, _Mapping]] = ..., failed: _Optional[_Mapping[int, _common_pb2.SequenceStatus]] = ...) -> None: ...
