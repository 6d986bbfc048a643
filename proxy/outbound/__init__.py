"""Manifold as an MCP client: transports to servers, connections, the registry of servers."""
