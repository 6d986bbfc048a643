"""Manifold: one MCP endpoint in front of many MCP servers."""

__all__ = ["__version__"]

__version__ = "0.1.0"
