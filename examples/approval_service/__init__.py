"""The example app backend: shows a confirmation card to the signed-in user and countersigns it (docs/design.md §12).

The party the agent is not: it holds its own Ed25519 key, publishes the public half as a JWKS, and signs an
approval whose ``dig`` it recomputed from the card it showed. See docs/approvals.md.
"""
