"""The HTTP client transports: a lean keep-alive HTTP/1.1 client (h1), Streamable HTTP in both
eras (streamable, stateless), legacy HTTP+SSE (sse_legacy), the choice by configured mode
(modes), what they share (common), and which redirects a request may follow (redirects).
"""
