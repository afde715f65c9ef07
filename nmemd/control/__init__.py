"""The daemon seen from outside: `control` asks a running daemon (RPC, ping, status), reads the store
when none runs, and starts and stops one. The CLI, setup (doctor, service) and the web viewer use it;
the daemon itself never does, so it sits above `daemon/` and imports only its lock and status facts.
"""
