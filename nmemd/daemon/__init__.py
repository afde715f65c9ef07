"""The process: the socket server, each connection's framing, deadlines, the single-instance lock,
the RPC verbs, logging and heap tuning, and the status it reports. Everything here runs the other
folders; nothing below imports it (the client side of the socket is `nmemd.client`, above it).
"""
