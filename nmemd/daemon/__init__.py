"""The process: the socket server, each connection's framing, deadlines, the single-instance lock,
the RPC verbs, logging and heap tuning, and `control`, the client side of the socket that the CLI and
setup use to reach a running daemon. Everything here runs the other folders; nothing below imports it.
"""
