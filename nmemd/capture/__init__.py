"""An event's way in: parse a hook payload into observations (`extract`, in the loop or in the
extraction worker), strip private text and redact secrets (`redact`; what each kind of secret looks like:
`secret_patterns`), find the project, queue the batch for the
writer (`ingest`) and drain what clients left in the inbox or spool while the daemon was away.
"""
