"""The stdio transport: an MCP server as a child process speaking newline-delimited JSON
(transport), the process and its pipes (child), and what Manifold keeps of its stderr (stderr).
"""
