"""The reply side: describing what happened, never doing it again (I5, I8). Continuations (a reply generated
once per succeeded action) and CheckReply (the reply guard over a turn's receipts). The guard itself is
``countersign.guard``; nothing here can reach an adapter."""
