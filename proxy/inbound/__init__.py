"""Manifold as an MCP server: the HTTP and stdio endpoints clients talk to."""
