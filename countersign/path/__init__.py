"""The request path, one module per stage, in the order a call meets them (docs/design.md §3):

policy -> quota -> prepare -> cards -> turn  (Invoke: a read runs now, a write becomes a card)
claim -> execute -> receipts -> settle        (Confirm: one caller executes, every other replays)
inverse                                       (how a compensated action reads)
pipeline                                      the orchestrator: calls the stages in order, no I/O of its own
"""
