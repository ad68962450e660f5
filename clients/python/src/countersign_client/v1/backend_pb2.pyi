from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LookupResult(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOOKUP_RESULT_UNSPECIFIED: _ClassVar[LookupResult]
    LOOKUP_RESULT_APPLIED: _ClassVar[LookupResult]
    LOOKUP_RESULT_ABSENT_FENCED: _ClassVar[LookupResult]
    LOOKUP_RESULT_ABSENT_UNFENCED: _ClassVar[LookupResult]
LOOKUP_RESULT_UNSPECIFIED: LookupResult
LOOKUP_RESULT_APPLIED: LookupResult
LOOKUP_RESULT_ABSENT_FENCED: LookupResult
LOOKUP_RESULT_ABSENT_UNFENCED: LookupResult

class BackendContext(_message.Message):
    __slots__ = ("tenant_id", "actor_id", "subject_id", "locale")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    actor_id: str
    subject_id: str
    locale: str
    def __init__(self, tenant_id: _Optional[str] = ..., actor_id: _Optional[str] = ..., subject_id: _Optional[str] = ..., locale: _Optional[str] = ...) -> None: ...

class BackendPreview(_message.Message):
    __slots__ = ("title", "target", "impact")
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    IMPACT_FIELD_NUMBER: _ClassVar[int]
    title: str
    target: str
    impact: str
    def __init__(self, title: _Optional[str] = ..., target: _Optional[str] = ..., impact: _Optional[str] = ...) -> None: ...

class PrepareRequest(_message.Message):
    __slots__ = ("tool_name", "arguments_json", "context")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    arguments_json: str
    context: BackendContext
    def __init__(self, tool_name: _Optional[str] = ..., arguments_json: _Optional[str] = ..., context: _Optional[_Union[BackendContext, _Mapping]] = ...) -> None: ...

class PrepareResponse(_message.Message):
    __slots__ = ("arguments_json", "resource_version", "preview")
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    arguments_json: str
    resource_version: str
    preview: BackendPreview
    def __init__(self, arguments_json: _Optional[str] = ..., resource_version: _Optional[str] = ..., preview: _Optional[_Union[BackendPreview, _Mapping]] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("tool_name", "arguments_json", "context")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    arguments_json: str
    context: BackendContext
    def __init__(self, tool_name: _Optional[str] = ..., arguments_json: _Optional[str] = ..., context: _Optional[_Union[BackendContext, _Mapping]] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ("resource_id", "resource_version", "result_json")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    resource_version: str
    result_json: str
    def __init__(self, resource_id: _Optional[str] = ..., resource_version: _Optional[str] = ..., result_json: _Optional[str] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("tool_name", "idempotency_key", "fence")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    idempotency_key: str
    fence: bool
    def __init__(self, tool_name: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., fence: _Optional[bool] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("result", "resource_id", "resource_version", "result_json")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    result: LookupResult
    resource_id: str
    resource_version: str
    result_json: str
    def __init__(self, result: _Optional[_Union[LookupResult, str]] = ..., resource_id: _Optional[str] = ..., resource_version: _Optional[str] = ..., result_json: _Optional[str] = ...) -> None: ...

class ToolBackendServiceCompensateRequest(_message.Message):
    __slots__ = ("tool_name", "resource_id", "arguments_json")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    resource_id: str
    arguments_json: str
    def __init__(self, tool_name: _Optional[str] = ..., resource_id: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class ToolBackendServiceCompensateResponse(_message.Message):
    __slots__ = ("resource_id", "result_json")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    result_json: str
    def __init__(self, resource_id: _Optional[str] = ..., result_json: _Optional[str] = ...) -> None: ...
