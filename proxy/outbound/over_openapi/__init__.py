"""The OpenAPI transport: a REST API described by an OpenAPI document, answered as an MCP server
(transport) from its document (source), with HTTP calls made by over_http's client.
"""
