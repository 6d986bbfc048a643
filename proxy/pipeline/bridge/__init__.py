"""Bridges between the protocol eras, for requests that need the client's input mid-call.

* :mod:`~proxy.pipeline.bridge.state`: the ``requestState`` Manifold issues (sealed, bound, short-lived).
* :mod:`~proxy.pipeline.bridge.mrtr`: a 2026-07-28 caller and a 2026-07-28 server: ``input_required``
  passed through, the server's state wrapped in Manifold's; a handshake-era caller and a
  2026-07-28 server: ``input_required`` unrolled into real requests to the client.
* :mod:`~proxy.pipeline.bridge.parking`: a 2026-07-28 caller and a handshake-era server: the server's
  request mid-call becomes ``input_required``, its call parked until the client retries.
"""
