"""SQLite: the schema and its migrations, the one write connection with its group commit and
in-memory dedup (`database`), read-only connections for queries, the WAL checkpointer and the
pragmas. It knows nothing of hooks, agents or the socket.
"""
