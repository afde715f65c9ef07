"""nmem-mcp: the stdio <-> daemon byte pump for MCP clients (arrives with the recall issue)."""

import sys


def main() -> None:
    sys.stderr.write("nmem-mcp: the MCP server is not available in this version yet\n")
    sys.exit(2)


if __name__ == "__main__":
    main()
