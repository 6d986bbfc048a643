"""REST APIs described by OpenAPI documents, as tools. Pure: a document's data in, tool
definitions and call plans out; arguments in, an HTTP request out; an HTTP response in, a tool
result out. The I/O (reading the document, making the calls) is
:mod:`proxy.outbound.over_openapi`'s.

May import: core, config.
"""
