"""websim's latency on the wire (websim/wire.py): the network's part of a host's latency is
where a TCP handshake shows it, and out of the server's own delay."""

from __future__ import annotations

import pytest

from crawler.fetching.fetcher import ServerSession
from crawler.fetching.settings import FetchSettings
from websim import WebSim, WebSpec
from websim.wire import Wire, unavailable

pytestmark = pytest.mark.integration  # serves websim

# One degrading host: 20 ms of latency, 20 requests/s (50 ms of service), no spread.
SPEC = WebSpec(
    hosts=1,
    pages=5,
    latency_ms=(20.0, 20.0),
    latency_sigma=0.0,
    rate_limit_rps=None,
    capacity_rps=(20.0, 20.0),
    keepalive_max=(100,),
    keepalive_weights=(1.0,),
    latency_on_wire=True,
)


def fetch_pages(sim: WebSim, pages: int = 3) -> list:
    session = ServerSession(FetchSettings())
    try:
        return [session.get(sim.url_of(page)) for page in range(pages)]
    finally:
        session.close()


def test_latency_on_the_wire_is_not_in_the_servers_delay() -> None:
    # Served without a wire, such a host answers in its service time alone: the 20 ms are
    # left to the delay line.
    with WebSim(SPEC) as sim:
        results = fetch_pages(sim)
    for result in results:
        assert result.status == 200 and result.wire_rtt_s is not None
        assert 0.045 <= result.wire_rtt_s < 0.065


@pytest.mark.skipif(unavailable() is not None, reason=f"no wire here: {unavailable()}")
def test_the_wire_delays_the_handshake_and_every_exchange() -> None:
    with Wire() as wire, wire.serving(WebSim(SPEC)) as sim:
        first, *reused = fetch_pages(sim)
    assert first.handshake_s is not None and 0.020 <= first.handshake_s < 0.035
    assert [result.handshake_s for result in reused] == [None, None]
    for result in (first, *reused):
        assert result.status == 200 and result.wire_rtt_s is not None
        assert 0.065 <= result.wire_rtt_s < 0.090  # 20 ms on the wire, then 50 in the server
        # The kernel's least RTT on the connection: the network's 20 ms, not the server's 50.
        assert result.network_rtt_s is not None and 0.020 <= result.network_rtt_s < 0.035
    # Out of the block, the thread is back on its own loopback: a websim there answers.
    with WebSim(WebSpec(hosts=1, pages=3, rate_limit_rps=None)) as plain:
        assert all(result.status == 200 for result in fetch_pages(plain, 1))
