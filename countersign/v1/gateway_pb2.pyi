import datetime

from countersign.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InvokeRequest(_message.Message):
    __slots__ = ("context", "tool_name", "arguments_json")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    tool_name: str
    arguments_json: str
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., tool_name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class InvokeResponse(_message.Message):
    __slots__ = ("result", "confirmation", "refusal", "replay", "action")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    result: ToolResult
    confirmation: ConfirmationCard
    refusal: Refusal
    replay: _common_pb2.Action
    action: _common_pb2.Action
    def __init__(self, result: _Optional[_Union[ToolResult, _Mapping]] = ..., confirmation: _Optional[_Union[ConfirmationCard, _Mapping]] = ..., refusal: _Optional[_Union[Refusal, _Mapping]] = ..., replay: _Optional[_Union[_common_pb2.Action, _Mapping]] = ..., action: _Optional[_Union[_common_pb2.Action, _Mapping]] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("tool_name", "result_json")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    result_json: str
    def __init__(self, tool_name: _Optional[str] = ..., result_json: _Optional[str] = ...) -> None: ...

class ConfirmationCard(_message.Message):
    __slots__ = ("token", "action_id", "capability_id", "tool_name", "risk", "preview", "prepared_arguments_json", "expires_at", "approval_digest", "approval")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    RISK_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    PREPARED_ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_DIGEST_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    token: str
    action_id: str
    capability_id: str
    tool_name: str
    risk: _common_pb2.RiskLevel
    preview: _common_pb2.Preview
    prepared_arguments_json: str
    expires_at: _timestamp_pb2.Timestamp
    approval_digest: str
    approval: _common_pb2.ApprovalRequirement
    def __init__(self, token: _Optional[str] = ..., action_id: _Optional[str] = ..., capability_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., risk: _Optional[_Union[_common_pb2.RiskLevel, str]] = ..., preview: _Optional[_Union[_common_pb2.Preview, _Mapping]] = ..., prepared_arguments_json: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., approval_digest: _Optional[str] = ..., approval: _Optional[_Union[_common_pb2.ApprovalRequirement, str]] = ...) -> None: ...

class Refusal(_message.Message):
    __slots__ = ("capability_id", "status", "guidance")
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GUIDANCE_FIELD_NUMBER: _ClassVar[int]
    capability_id: str
    status: _common_pb2.CapabilityStatus
    guidance: str
    def __init__(self, capability_id: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.CapabilityStatus, str]] = ..., guidance: _Optional[str] = ...) -> None: ...

class ConfirmRequest(_message.Message):
    __slots__ = ("context", "token", "wait_ms", "approval")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    token: str
    wait_ms: int
    approval: str
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., token: _Optional[str] = ..., wait_ms: _Optional[int] = ..., approval: _Optional[str] = ...) -> None: ...

class ConfirmResponse(_message.Message):
    __slots__ = ("action",)
    ACTION_FIELD_NUMBER: _ClassVar[int]
    action: _common_pb2.Action
    def __init__(self, action: _Optional[_Union[_common_pb2.Action, _Mapping]] = ...) -> None: ...

class RejectRequest(_message.Message):
    __slots__ = ("context", "token")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    token: str
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

class RejectResponse(_message.Message):
    __slots__ = ("action",)
    ACTION_FIELD_NUMBER: _ClassVar[int]
    action: _common_pb2.Action
    def __init__(self, action: _Optional[_Union[_common_pb2.Action, _Mapping]] = ...) -> None: ...

class GetActionRequest(_message.Message):
    __slots__ = ("context", "action_id")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    action_id: str
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., action_id: _Optional[str] = ...) -> None: ...

class GetActionResponse(_message.Message):
    __slots__ = ("action",)
    ACTION_FIELD_NUMBER: _ClassVar[int]
    action: _common_pb2.Action
    def __init__(self, action: _Optional[_Union[_common_pb2.Action, _Mapping]] = ...) -> None: ...

class CompensateRequest(_message.Message):
    __slots__ = ("context", "action_id")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    action_id: str
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., action_id: _Optional[str] = ...) -> None: ...

class CompensateResponse(_message.Message):
    __slots__ = ("action", "confirmation")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    action: _common_pb2.Action
    confirmation: ConfirmationCard
    def __init__(self, action: _Optional[_Union[_common_pb2.Action, _Mapping]] = ..., confirmation: _Optional[_Union[ConfirmationCard, _Mapping]] = ...) -> None: ...

class ReconcileRequest(_message.Message):
    __slots__ = ("context", "action_id")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    action_id: str
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., action_id: _Optional[str] = ...) -> None: ...

class ReconcileResponse(_message.Message):
    __slots__ = ("action",)
    ACTION_FIELD_NUMBER: _ClassVar[int]
    action: _common_pb2.Action
    def __init__(self, action: _Optional[_Union[_common_pb2.Action, _Mapping]] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("grant_id", "capability_id", "uses", "uses_left", "expires_at", "pinned_arguments_json", "issuer", "created_at", "revoked")
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    USES_FIELD_NUMBER: _ClassVar[int]
    USES_LEFT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    PINNED_ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    ISSUER_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    grant_id: str
    capability_id: str
    uses: int
    uses_left: int
    expires_at: _timestamp_pb2.Timestamp
    pinned_arguments_json: str
    issuer: str
    created_at: _timestamp_pb2.Timestamp
    revoked: bool
    def __init__(self, grant_id: _Optional[str] = ..., capability_id: _Optional[str] = ..., uses: _Optional[int] = ..., uses_left: _Optional[int] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., pinned_arguments_json: _Optional[str] = ..., issuer: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoked: _Optional[bool] = ...) -> None: ...

class CreateGrantRequest(_message.Message):
    __slots__ = ("context", "approval")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    approval: str
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., approval: _Optional[str] = ...) -> None: ...

class CreateGrantResponse(_message.Message):
    __slots__ = ("grant", "replayed")
    GRANT_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    grant: Grant
    replayed: bool
    def __init__(self, grant: _Optional[_Union[Grant, _Mapping]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class ListGrantsRequest(_message.Message):
    __slots__ = ("context",)
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ...) -> None: ...

class ListGrantsResponse(_message.Message):
    __slots__ = ("grants",)
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    grants: _containers.RepeatedCompositeFieldContainer[Grant]
    def __init__(self, grants: _Optional[_Iterable[_Union[Grant, _Mapping]]] = ...) -> None: ...

class RevokeGrantRequest(_message.Message):
    __slots__ = ("context", "grant_id")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    grant_id: str
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., grant_id: _Optional[str] = ...) -> None: ...

class RevokeGrantResponse(_message.Message):
    __slots__ = ("grant",)
    GRANT_FIELD_NUMBER: _ClassVar[int]
    grant: Grant
    def __init__(self, grant: _Optional[_Union[Grant, _Mapping]] = ...) -> None: ...
