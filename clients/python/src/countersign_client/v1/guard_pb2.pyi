from countersign_client.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GuardVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GUARD_VERDICT_UNSPECIFIED: _ClassVar[GuardVerdict]
    GUARD_VERDICT_PASSED: _ClassVar[GuardVerdict]
    GUARD_VERDICT_REPLACED: _ClassVar[GuardVerdict]
GUARD_VERDICT_UNSPECIFIED: GuardVerdict
GUARD_VERDICT_PASSED: GuardVerdict
GUARD_VERDICT_REPLACED: GuardVerdict

class CheckReplyRequest(_message.Message):
    __slots__ = ("context", "reply_text", "action_ids")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    REPLY_TEXT_FIELD_NUMBER: _ClassVar[int]
    ACTION_IDS_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    reply_text: str
    action_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., reply_text: _Optional[str] = ..., action_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CheckReplyResponse(_message.Message):
    __slots__ = ("verdict", "reply_text", "matched_claims", "reason")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REPLY_TEXT_FIELD_NUMBER: _ClassVar[int]
    MATCHED_CLAIMS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    verdict: GuardVerdict
    reply_text: str
    matched_claims: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    def __init__(self, verdict: _Optional[_Union[GuardVerdict, str]] = ..., reply_text: _Optional[str] = ..., matched_claims: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ...) -> None: ...
