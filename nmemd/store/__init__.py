"""SQLite: the schema and its migrations, the one write connection (`database`), a batch of events
planned into rows in one transaction (`batches`), what identifies an event across its paths
(`keys`), what a start puts right (`repair`), in-memory dedup, read-only connections for queries,
the WAL checkpointer and the pragmas. It knows nothing of hooks, agents or the socket.
"""
