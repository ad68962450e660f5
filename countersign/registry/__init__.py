"""The capability registry: load one YAML file, enforce the registration rules, freeze a snapshot.

Types in ``model``, loading and the rules in ``load``, the closed-schema rule in ``schema``, template filling
(previews, receipts, compensations, URLs) in ``templates``. Adapters import this package, never the sidecar.

Every rule that fails stops the start with ``<file>: tool '<name>': <rule>: <detail>``. The
rule names are stable (tests assert them, one bad fixture file per rule):

    known-keys                         no misspelled or unknown keys
    unique-names                       tool names and capability ids are unique
    write-needs-enabled-capability     a write tool names an enabled capability
    no-tool-for-disabled-capability    a planned/forbidden capability never reaches a tool
    capability-exists                  a read tool's capability, when named, exists
    capability-names-tool              the capability a tool names names that tool back
    risk-matches-capability            a write tool's risk equals its capability's
    confirmation-matches-capability    ... and so does its confirmation
    write-needs-confirmation           a write may not set confirmation: none
    schema-valid                       the schema is a valid JSON Schema of an object
    schema-closed                      every object closed, every array's items closed, through every branch
    alias-no-collision                 an alias is not a declared property and maps to one
    template-fields                    templates name only arguments, the action or the receipt
    adapter-valid                      the adapter is complete for its kind
    compensation-is-write-tool         a compensation names a registered write tool
    approval-matches-capability        a write tool's approval (none | signed) equals its capability's
    approval-needs-issuer              approval: signed only where an approval issuer is configured (--approvals)

``approval`` defaults, when neither the tool nor its capability declares it, to ``signed`` for a write with
``confirmation: always`` or risk ``high`` / ``irreversible`` whenever an issuer is configured, else ``none``;
``load(path, issuers=...)`` says whether one is.

One more rule depends on the settings too, so it is checked at start (``check_deadlines``), not by
``load``: ``deadline-below-lease``, a write tool's deadline (adapter.timeout_ms, else
--downstream-deadline) plus a margin must fit within --lease.
"""

from countersign.registry.load import build, check_deadlines, load, loads
from countersign.registry.model import (
    APPROVALS,
    CONFIRMATIONS,
    HTTP_METHODS,
    RISKS,
    SCOPES,
    STATUSES,
    VERBS,
    AdapterSpec,
    Capability,
    Compensation,
    HttpCall,
    ReceiptSpec,
    Registry,
    Tool,
)
from countersign.registry.templates import ACTION_FIELDS, PLACEHOLDER, RECEIPT_FIELDS

__all__ = [
    "ACTION_FIELDS",
    "APPROVALS",
    "CONFIRMATIONS",
    "HTTP_METHODS",
    "PLACEHOLDER",
    "RECEIPT_FIELDS",
    "RISKS",
    "SCOPES",
    "STATUSES",
    "VERBS",
    "AdapterSpec",
    "Capability",
    "Compensation",
    "HttpCall",
    "ReceiptSpec",
    "Registry",
    "Tool",
    "build",
    "check_deadlines",
    "load",
    "loads",
]
