"""The user's machine: hook and MCP registration in agents' settings (`settings_file`), the end-to-end
check (`doctor`) and systemd / launchd units (`service`). These drive the daemon from outside it.
"""
