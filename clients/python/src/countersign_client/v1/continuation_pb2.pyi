from countersign_client.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ContinuationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTINUATION_STATE_UNSPECIFIED: _ClassVar[ContinuationState]
    CONTINUATION_STATE_PENDING: _ClassVar[ContinuationState]
    CONTINUATION_STATE_READY: _ClassVar[ContinuationState]
    CONTINUATION_STATE_RUNNING: _ClassVar[ContinuationState]
    CONTINUATION_STATE_SETTLED: _ClassVar[ContinuationState]
CONTINUATION_STATE_UNSPECIFIED: ContinuationState
CONTINUATION_STATE_PENDING: ContinuationState
CONTINUATION_STATE_READY: ContinuationState
CONTINUATION_STATE_RUNNING: ContinuationState
CONTINUATION_STATE_SETTLED: ContinuationState

class ContinuationSnapshot(_message.Message):
    __slots__ = ("question", "locale", "lead_in")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    LEAD_IN_FIELD_NUMBER: _ClassVar[int]
    question: str
    locale: str
    lead_in: str
    def __init__(self, question: _Optional[str] = ..., locale: _Optional[str] = ..., lead_in: _Optional[str] = ...) -> None: ...

class ReadFact(_message.Message):
    __slots__ = ("tool_name", "status", "summary")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    status: str
    summary: str
    def __init__(self, tool_name: _Optional[str] = ..., status: _Optional[str] = ..., summary: _Optional[str] = ...) -> None: ...

class Continuation(_message.Message):
    __slots__ = ("continuation_id", "token", "action_id", "state", "snapshot", "facts", "receipt", "reply_text", "replayed")
    CONTINUATION_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    REPLY_TEXT_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    continuation_id: str
    token: str
    action_id: str
    state: ContinuationState
    snapshot: ContinuationSnapshot
    facts: _containers.RepeatedCompositeFieldContainer[ReadFact]
    receipt: _common_pb2.Receipt
    reply_text: str
    replayed: bool
    def __init__(self, continuation_id: _Optional[str] = ..., token: _Optional[str] = ..., action_id: _Optional[str] = ..., state: _Optional[_Union[ContinuationState, str]] = ..., snapshot: _Optional[_Union[ContinuationSnapshot, _Mapping]] = ..., facts: _Optional[_Iterable[_Union[ReadFact, _Mapping]]] = ..., receipt: _Optional[_Union[_common_pb2.Receipt, _Mapping]] = ..., reply_text: _Optional[str] = ..., replayed: _Optional[bool] = ...) -> None: ...

class OpenContinuationRequest(_message.Message):
    __slots__ = ("context", "action_id", "snapshot")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    action_id: str
    snapshot: ContinuationSnapshot
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., action_id: _Optional[str] = ..., snapshot: _Optional[_Union[ContinuationSnapshot, _Mapping]] = ...) -> None: ...

class OpenContinuationResponse(_message.Message):
    __slots__ = ("continuation",)
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    continuation: Continuation
    def __init__(self, continuation: _Optional[_Union[Continuation, _Mapping]] = ...) -> None: ...

class ClaimContinuationRequest(_message.Message):
    __slots__ = ("context", "token")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    token: str
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

class ClaimContinuationResponse(_message.Message):
    __slots__ = ("continuation",)
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    continuation: Continuation
    def __init__(self, continuation: _Optional[_Union[Continuation, _Mapping]] = ...) -> None: ...

class SettleContinuationRequest(_message.Message):
    __slots__ = ("context", "token", "reply_text")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    REPLY_TEXT_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    token: str
    reply_text: str
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., token: _Optional[str] = ..., reply_text: _Optional[str] = ...) -> None: ...

class SettleContinuationResponse(_message.Message):
    __slots__ = ("continuation",)
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    continuation: Continuation
    def __init__(self, continuation: _Optional[_Union[Continuation, _Mapping]] = ...) -> None: ...

class ReleaseContinuationRequest(_message.Message):
    __slots__ = ("context", "token", "reason")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    token: str
    reason: str
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., token: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReleaseContinuationResponse(_message.Message):
    __slots__ = ("continuation",)
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    continuation: Continuation
    def __init__(self, continuation: _Optional[_Union[Continuation, _Mapping]] = ...) -> None: ...
