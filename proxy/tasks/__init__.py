"""Tasks relayed through Manifold: its own task ids, the records that outlive a session, the relay.

May import: core, protocol, catalog, policy, config, observe, outbound, clients, pipeline.

* :mod:`~proxy.tasks.ids`: task ids sealed to their owner and endpoint, pure.
* :mod:`~proxy.tasks.store`: task records, in memory; :mod:`~proxy.tasks.redis_store` in Redis.
* :mod:`~proxy.tasks.relay`: ``tasks/*`` answered, task creation recorded, status routed.
* :mod:`~proxy.tasks.modern`: the 2026-07-28 tasks extension, bridged onto the relay.
* :mod:`~proxy.tasks.modern_servers`: 2026-07-28 servers' own tasks, relayed to callers of both eras.
"""
