"""The process: the socket server, each connection's framing, deadlines, the single-instance lock,
the RPC verbs, logging and heap tuning, and the status it reports. Everything here runs the other
folders; nothing below imports it (what asks it from outside is `nmemd.control`, above it).
"""
