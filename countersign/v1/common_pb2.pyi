import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AdminMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADMIN_MODE_UNSPECIFIED: _ClassVar[AdminMode]
    ADMIN_MODE_NONE: _ClassVar[AdminMode]
    ADMIN_MODE_READONLY: _ClassVar[AdminMode]
    ADMIN_MODE_MAINTAIN: _ClassVar[AdminMode]

class SessionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_MODE_UNSPECIFIED: _ClassVar[SessionMode]
    SESSION_MODE_AUTO: _ClassVar[SessionMode]
    SESSION_MODE_READ_ONLY: _ClassVar[SessionMode]
    SESSION_MODE_CHAT_ONLY: _ClassVar[SessionMode]

class RiskLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RISK_LEVEL_UNSPECIFIED: _ClassVar[RiskLevel]
    RISK_LEVEL_LOW: _ClassVar[RiskLevel]
    RISK_LEVEL_MEDIUM: _ClassVar[RiskLevel]
    RISK_LEVEL_HIGH: _ClassVar[RiskLevel]
    RISK_LEVEL_IRREVERSIBLE: _ClassVar[RiskLevel]

class CapabilityStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAPABILITY_STATUS_UNSPECIFIED: _ClassVar[CapabilityStatus]
    CAPABILITY_STATUS_ENABLED: _ClassVar[CapabilityStatus]
    CAPABILITY_STATUS_PLANNED: _ClassVar[CapabilityStatus]
    CAPABILITY_STATUS_FORBIDDEN: _ClassVar[CapabilityStatus]

class ActionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_STATE_UNSPECIFIED: _ClassVar[ActionState]
    ACTION_STATE_READY: _ClassVar[ActionState]
    ACTION_STATE_RUNNING: _ClassVar[ActionState]
    ACTION_STATE_SUCCEEDED: _ClassVar[ActionState]
    ACTION_STATE_FAILED: _ClassVar[ActionState]
    ACTION_STATE_UNKNOWN: _ClassVar[ActionState]
    ACTION_STATE_REJECTED: _ClassVar[ActionState]
    ACTION_STATE_EXPIRED: _ClassVar[ActionState]
    ACTION_STATE_COMPENSATING: _ClassVar[ActionState]
    ACTION_STATE_COMPENSATED: _ClassVar[ActionState]
    ACTION_STATE_COMPENSATION_FAILED: _ClassVar[ActionState]
    ACTION_STATE_NEEDS_MANUAL_REVIEW: _ClassVar[ActionState]

class ReceiptStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECEIPT_STATUS_UNSPECIFIED: _ClassVar[ReceiptStatus]
    RECEIPT_STATUS_SUCCEEDED: _ClassVar[ReceiptStatus]
    RECEIPT_STATUS_FAILED: _ClassVar[ReceiptStatus]

class ApprovalRequirement(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_REQUIREMENT_UNSPECIFIED: _ClassVar[ApprovalRequirement]
    APPROVAL_REQUIREMENT_NONE: _ClassVar[ApprovalRequirement]
    APPROVAL_REQUIREMENT_SIGNED: _ClassVar[ApprovalRequirement]
ADMIN_MODE_UNSPECIFIED: AdminMode
ADMIN_MODE_NONE: AdminMode
ADMIN_MODE_READONLY: AdminMode
ADMIN_MODE_MAINTAIN: AdminMode
SESSION_MODE_UNSPECIFIED: SessionMode
SESSION_MODE_AUTO: SessionMode
SESSION_MODE_READ_ONLY: SessionMode
SESSION_MODE_CHAT_ONLY: SessionMode
RISK_LEVEL_UNSPECIFIED: RiskLevel
RISK_LEVEL_LOW: RiskLevel
RISK_LEVEL_MEDIUM: RiskLevel
RISK_LEVEL_HIGH: RiskLevel
RISK_LEVEL_IRREVERSIBLE: RiskLevel
CAPABILITY_STATUS_UNSPECIFIED: CapabilityStatus
CAPABILITY_STATUS_ENABLED: CapabilityStatus
CAPABILITY_STATUS_PLANNED: CapabilityStatus
CAPABILITY_STATUS_FORBIDDEN: CapabilityStatus
ACTION_STATE_UNSPECIFIED: ActionState
ACTION_STATE_READY: ActionState
ACTION_STATE_RUNNING: ActionState
ACTION_STATE_SUCCEEDED: ActionState
ACTION_STATE_FAILED: ActionState
ACTION_STATE_UNKNOWN: ActionState
ACTION_STATE_REJECTED: ActionState
ACTION_STATE_EXPIRED: ActionState
ACTION_STATE_COMPENSATING: ActionState
ACTION_STATE_COMPENSATED: ActionState
ACTION_STATE_COMPENSATION_FAILED: ActionState
ACTION_STATE_NEEDS_MANUAL_REVIEW: ActionState
RECEIPT_STATUS_UNSPECIFIED: ReceiptStatus
RECEIPT_STATUS_SUCCEEDED: ReceiptStatus
RECEIPT_STATUS_FAILED: ReceiptStatus
APPROVAL_REQUIREMENT_UNSPECIFIED: ApprovalRequirement
APPROVAL_REQUIREMENT_NONE: ApprovalRequirement
APPROVAL_REQUIREMENT_SIGNED: ApprovalRequirement

class CallContext(_message.Message):
    __slots__ = ("tenant_id", "actor_id", "subject_id", "session_id", "request_id", "role", "admin_context_id", "admin_mode", "locale", "session_mode")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ADMIN_CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    ADMIN_MODE_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    SESSION_MODE_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    actor_id: str
    subject_id: str
    session_id: str
    request_id: str
    role: str
    admin_context_id: str
    admin_mode: AdminMode
    locale: str
    session_mode: SessionMode
    def __init__(self, tenant_id: _Optional[str] = ..., actor_id: _Optional[str] = ..., subject_id: _Optional[str] = ..., session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., role: _Optional[str] = ..., admin_context_id: _Optional[str] = ..., admin_mode: _Optional[_Union[AdminMode, str]] = ..., locale: _Optional[str] = ..., session_mode: _Optional[_Union[SessionMode, str]] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("action_id", "tool_name", "status", "resource_id", "resource_version", "summary", "evidence_json", "settled_at", "grant_id", "approval")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_JSON_FIELD_NUMBER: _ClassVar[int]
    SETTLED_AT_FIELD_NUMBER: _ClassVar[int]
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    tool_name: str
    status: ReceiptStatus
    resource_id: str
    resource_version: str
    summary: str
    evidence_json: str
    settled_at: _timestamp_pb2.Timestamp
    grant_id: str
    approval: ApprovalEvidence
    def __init__(self, action_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., status: _Optional[_Union[ReceiptStatus, str]] = ..., resource_id: _Optional[str] = ..., resource_version: _Optional[str] = ..., summary: _Optional[str] = ..., evidence_json: _Optional[str] = ..., settled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., grant_id: _Optional[str] = ..., approval: _Optional[_Union[ApprovalEvidence, _Mapping]] = ...) -> None: ...

class ApprovalEvidence(_message.Message):
    __slots__ = ("issuer", "kid", "jti", "acr", "amr")
    ISSUER_FIELD_NUMBER: _ClassVar[int]
    KID_FIELD_NUMBER: _ClassVar[int]
    JTI_FIELD_NUMBER: _ClassVar[int]
    ACR_FIELD_NUMBER: _ClassVar[int]
    AMR_FIELD_NUMBER: _ClassVar[int]
    issuer: str
    kid: str
    jti: str
    acr: str
    amr: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, issuer: _Optional[str] = ..., kid: _Optional[str] = ..., jti: _Optional[str] = ..., acr: _Optional[str] = ..., amr: _Optional[_Iterable[str]] = ...) -> None: ...

class ActionError(_message.Message):
    __slots__ = ("reason", "message", "retryable")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    retryable: bool
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class Action(_message.Message):
    __slots__ = ("action_id", "state", "receipt", "error", "replayed", "tool_name")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    state: ActionState
    receipt: Receipt
    error: ActionError
    replayed: bool
    tool_name: str
    def __init__(self, action_id: _Optional[str] = ..., state: _Optional[_Union[ActionState, str]] = ..., receipt: _Optional[_Union[Receipt, _Mapping]] = ..., error: _Optional[_Union[ActionError, _Mapping]] = ..., replayed: _Optional[bool] = ..., tool_name: _Optional[str] = ...) -> None: ...

class PreviewDetail(_message.Message):
    __slots__ = ("label", "value")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    label: str
    value: str
    def __init__(self, label: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class Preview(_message.Message):
    __slots__ = ("title", "target", "impact", "details")
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    IMPACT_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    title: str
    target: str
    impact: str
    details: _containers.RepeatedCompositeFieldContainer[PreviewDetail]
    def __init__(self, title: _Optional[str] = ..., target: _Optional[str] = ..., impact: _Optional[str] = ..., details: _Optional[_Iterable[_Union[PreviewDetail, _Mapping]]] = ...) -> None: ...
