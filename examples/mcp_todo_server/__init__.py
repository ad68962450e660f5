"""An example MCP server: the todo service's store behind the Model Context Protocol (Streamable HTTP at /mcp),
built with the official SDK. Countersign reaches it through its MCP adapter (the back door,
``countersign/adapters/mcp.py``); ``examples/registry_mcp.yaml`` registers its tools.

Tools:

    create_todo(title, dueAt?, priority?)          a write: once per idempotency key, atomically (the key from
                                                   ``_meta["io.countersign/idempotency-key"]``, else the
                                                   ``Idempotency-Key`` header; a second call with the same key
                                                   answers the first call's result, never a second todo)
    list_todos(status?)                            a read
    find_todo_by_key(idempotency_key, fence?)      the lookup: what the key produced, ``{"found": false}``, or
                                                   with ``fence: true`` an absent key fenced for good
                                                   (``{"found": false, "fenced": true}``)
    prepare_todo(tool, arguments, context)         the prepare: concrete arguments and a preview

For tests: ``GET /_test/log`` (every JSON-RPC request that reached /mcp), ``GET /_test/todos`` (every todo),
``POST /_test/faults`` (``{"tool", "mode", "times"?, "seconds"?, "reason"?, "code"?, "size"?}``), and
``DELETE`` of either to clear it. ``python -m examples.mcp_todo_server --port 0`` prints one JSON line with its URL.
"""
