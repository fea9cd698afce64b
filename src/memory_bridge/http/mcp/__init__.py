"""The MCP endpoint (`/mcp`): the proxy's memory as tools for any MCP client (server.py)."""
