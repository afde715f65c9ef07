"""Each agent's payloads as its hooks send them: recorded from the real CLI where one runs offline
(tests/data/<agent>), built from the agent's documentation where none does (Cursor, Cline's VS Code
hooks). Claude Code's are in support.fixtures."""
