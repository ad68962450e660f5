"""The tamper-evident audit trail: one MAC-chained stream of events per action (docs/design.md §10).

``chain`` is the format (encoding, MACs, the state each event records), ``writer.Audit`` appends events in the
background, ``verify`` walks every chain and cross-checks every record against it (``countersign audit verify``).
"""

from countersign.audit.writer import Audit

__all__ = ["Audit"]
