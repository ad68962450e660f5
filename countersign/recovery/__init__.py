"""Recovery: what happens when the path could not finish. Reconciliation by evidence (reconcile), undoing a
succeeded action by its declared inverse (compensate), and the operator's tools (operator: actions list, show,
resolve; audit verify, export)."""
