"""A deterministic synthetic web served on loopback, for tests, benchmarks and demos.

Usage::

    spec = WebSpec(hosts=50, pages=20000, seed=1)
    web = build_web(spec)              # the graph and host profiles, no network
    with WebSim(spec) as sim:          # served by a child process on 127.0.x.y:port
        crawl(sim.hub_url)
        assert fetched == sim.reachable_allowed_urls()
"""

from websim.graph import HostProfile, Web, build_web
from websim.physical import PhysicalQueue
from websim.sim import WebSim, serve_forever
from websim.spec import WebSpec, host_address

__all__ = [
    "HostProfile",
    "PhysicalQueue",
    "Web",
    "WebSim",
    "WebSpec",
    "build_web",
    "host_address",
    "serve_forever",
]
