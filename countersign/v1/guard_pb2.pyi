from countersign.v1 import common_pb2 as _common_pb2
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
    __slots__ = ("verdict", "reply_text", "matched_claims", "reason", "claims", "exclusions", "unsupported_language")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REPLY_TEXT_FIELD_NUMBER: _ClassVar[int]
    MATCHED_CLAIMS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIONS_FIELD_NUMBER: _ClassVar[int]
    UNSUPPORTED_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    verdict: GuardVerdict
    reply_text: str
    matched_claims: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    claims: _containers.RepeatedCompositeFieldContainer[GuardClaim]
    exclusions: _containers.RepeatedCompositeFieldContainer[GuardExclusion]
    unsupported_language: str
    def __init__(self, verdict: _Optional[_Union[GuardVerdict, str]] = ..., reply_text: _Optional[str] = ..., matched_claims: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., claims: _Optional[_Iterable[_Union[GuardClaim, _Mapping]]] = ..., exclusions: _Optional[_Iterable[_Union[GuardExclusion, _Mapping]]] = ..., unsupported_language: _Optional[str] = ...) -> None: ...

class GuardClaim(_message.Message):
    __slots__ = ("clause", "rule", "verb", "verb_class", "lexicon")
    CLAUSE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    VERB_FIELD_NUMBER: _ClassVar[int]
    VERB_CLASS_FIELD_NUMBER: _ClassVar[int]
    LEXICON_FIELD_NUMBER: _ClassVar[int]
    clause: str
    rule: str
    verb: str
    verb_class: str
    lexicon: str
    def __init__(self, clause: _Optional[str] = ..., rule: _Optional[str] = ..., verb: _Optional[str] = ..., verb_class: _Optional[str] = ..., lexicon: _Optional[str] = ...) -> None: ...

class GuardExclusion(_message.Message):
    __slots__ = ("clause", "rule", "cue")
    CLAUSE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    CUE_FIELD_NUMBER: _ClassVar[int]
    clause: str
    rule: str
    cue: str
    def __init__(self, clause: _Optional[str] = ..., rule: _Optional[str] = ..., cue: _Optional[str] = ...) -> None: ...
