"""websim: deterministic graph, honest ground truth, and a server that behaves like the spec."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import lxml.html
import numpy as np
import pyarrow.parquet as pq
import pytest
import requests
from protego import Protego
from w3lib.url import canonicalize_url

from websim import WebSim, WebSpec, build_web
from websim.pages import Renderer
from websim.queueing import MAX_UTILIZATION, ArrivalRate, QueueingModel
from websim.truth import reachable_pages

SMALL = WebSpec(hosts=3, pages=200, seed=1, latency_ms=(0.0, 0.0), rate_limit_rps=None)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sim():
    with WebSim(SMALL) as served:
        yield served


@pytest.fixture(scope="module")
def exported(sim, tmp_path_factory):
    directory = tmp_path_factory.mktemp("websim")
    sim.export(directory)
    return {
        name: pq.read_table(directory / f"{name}.parquet") for name in ("pages", "links", "hosts")
    }


def _links_by_src(exported) -> dict[str, set[str]]:
    links = defaultdict(set)
    table = exported["links"].to_pydict()
    for src, dst in zip(table["src_url"], table["dst_url"], strict=True):
        links[src].add(dst)
    return links


# -- the graph, no network ---------------------------------------------------------------------


def test_same_seed_same_web_and_other_seed_another():
    a, b = build_web(SMALL), build_web(SMALL)
    assert a.paths == b.paths and a.hosts == b.hosts
    for name in ("out_ptr", "out_dst", "pagerank", "zipf_quality", "size", "kind"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    c = build_web(WebSpec(hosts=3, pages=200, seed=2))
    assert not np.array_equal(a.out_dst, c.out_dst) or a.paths != c.paths


def test_spec_is_validated():
    with pytest.raises(ValueError):
        WebSpec(hosts=10, pages=5)
    with pytest.raises(ValueError):
        WebSpec(rate_limit_rps=(0.0, 5.0))
    for hostile in (("no_such_scenario",), ("gzip_bomb", "gzip_bomb")):
        with pytest.raises(ValueError, match="distinct scenarios"):
            WebSim(WebSpec(hosts=2, pages=10, hostile=hostile))


def test_degrees_are_heavy_tailed_and_hit_the_requested_mean():
    web = build_web(WebSpec(hosts=10, pages=5000, links_per_page=12))
    out_degree = np.diff(web.out_ptr)
    assert 11 <= out_degree.mean() <= 13  # links as written, repeats included
    assert out_degree.max() > 8 * out_degree.mean()
    _, dst = web.unique_links
    in_degree = np.bincount(dst, minlength=web.n_pages)
    assert in_degree.max() > 30 * np.median(in_degree)


def test_link_locality_follows_the_spec():
    for share in (0.85, 0.5):
        web = build_web(WebSpec(hosts=20, pages=4000, same_host_link_share=share))
        src, dst = web.unique_links
        same = (web.host_of[src] == web.host_of[dst]).mean()
        assert abs(same - share) < 0.06, (share, same)


def test_host_sizes_are_skewed_and_nonempty():
    web = build_web(WebSpec(hosts=40, pages=4000))
    sizes = np.diff(web.host_start)
    assert sizes.min() >= 1 and sizes.sum() == 4000
    assert sizes.max() > 4 * np.median(sizes)
    assert [h.pages for h in web.hosts] == sizes.tolist()


def test_quality_scores():
    web = build_web(WebSpec(hosts=5, pages=1000))
    assert web.pagerank.sum() == pytest.approx(1.0)
    assert (web.pagerank > 0).all()
    assert np.allclose(np.sort(web.zipf_quality)[::-1], 1.0 / np.arange(1, 1001))
    # Independent of the graph: the best Zipf page is not simply the best PageRank page.
    assert abs(np.corrcoef(web.pagerank, web.zipf_quality)[0, 1]) < 0.3


def test_every_allowed_page_is_reachable_from_the_roots():
    web = build_web(WebSpec(hosts=8, pages=3000, robots_share=0.5))
    reached = reachable_pages(web, web.host_start[:-1])
    assert np.array_equal(reached, web.allowed)
    assert (~web.allowed).sum() > 0


def test_host_profiles_follow_the_spec():
    web = build_web(WebSpec(hosts=500, pages=1000))
    keepalive = np.array([h.keepalive_max for h in web.hosts])
    assert 0.18 < (keepalive == 1).mean() < 0.30 and 0.58 < (keepalive == 100).mean() < 0.74
    assert all(5 <= h.rate_limit_rps <= 50 for h in web.hosts)
    assert {h.ban_status for h in web.hosts} == {429, 503}
    robots = [h for h in web.hosts if h.robots_disallow]
    assert 0.22 < len(robots) / 500 < 0.38
    assert all(2 <= h.latency_ms_median <= 30 for h in web.hosts)
    assert all(h.crawl_delay_s is None for h in web.hosts if not h.robots_disallow)
    unlimited = build_web(WebSpec(hosts=5, pages=10, rate_limit_rps=None, crawl_delay_s=0))
    assert all(h.rate_limit_rps is None and h.crawl_delay_s is None for h in unlimited.hosts)


# -- served pages and ground truth ------------------------------------------------------------


@pytest.mark.integration
def test_addresses(sim):
    port = sim.port
    assert sim.hub_url == f"http://127.0.1.1:{port}/hub"
    assert sim.host_urls == [f"http://127.0.1.{i}:{port}/" for i in (1, 2, 3)]
    assert sim.url_of(0) == sim.host_urls[0]


@pytest.mark.integration
def test_served_pages_parse_to_exactly_the_exported_links(sim, exported):
    links = _links_by_src(exported)
    pages = exported["pages"].to_pydict()
    forms: set[str] = set()
    session = requests.Session()
    for url, mime, size in zip(pages["url"], pages["mime"], pages["bytes"], strict=True):
        response = session.get(url)
        assert response.status_code == 200, url
        assert len(response.content) == size
        if mime == "application/pdf":
            assert response.headers["Content-Type"] == "application/pdf"
            assert response.content.startswith(b"%PDF") and url not in links
            continue
        assert response.headers["Content-Type"] == "text/html; charset=utf-8"
        root = lxml.html.document_fromstring(response.content)
        assert root.findtext(".//title")
        base = url
        for href in root.xpath("//base/@href"):
            base = urljoin(url, href)
            forms.add("base")
        found = set()
        for href in root.xpath("//a/@href"):
            forms.update(_link_forms(href))
            absolute = urljoin(base, href)
            if urlsplit(absolute).scheme in ("http", "https"):
                found.add(canonicalize_url(absolute))
        assert found == links.get(url, set()), url
    assert forms >= {
        "base", "relative", "dot-relative", "parent-relative", "root-relative", "absolute",
        "protocol-relative", "fragment", "unsorted-query", "mailto",
    }  # fmt: skip


def _link_forms(href: str) -> set[str]:
    forms = set()
    if href.startswith("mailto:"):
        return {"mailto"}
    if href.startswith("http://"):
        forms.add("absolute")
    elif href.startswith("//"):
        forms.add("protocol-relative")
    elif href.startswith("/"):
        forms.add("root-relative")
    elif href.startswith("../"):
        forms.add("parent-relative")
    elif href.startswith("./"):
        forms.add("dot-relative")
    else:
        forms.add("relative")
    if "#" in href:
        forms.add("fragment")
    if "?sort=" in href:
        forms.add("unsorted-query")
    return forms


@pytest.mark.integration
def test_urls_are_canonical_by_w3lib(exported):
    urls = exported["pages"].column("url").to_pylist()
    urls += exported["links"].column("dst_url").to_pylist()
    assert all(canonicalize_url(u) == u for u in urls)
    assert any("?" in u for u in urls)


@pytest.mark.integration
def test_export_schema(sim, exported, tmp_path):
    assert exported["pages"].column_names == [
        "page_id", "url", "host", "path", "mime", "pagerank", "zipf_quality",
        "robots_allowed", "bytes",
    ]  # fmt: skip
    assert exported["links"].column_names == ["src_url", "dst_url"]
    assert exported["hosts"].column_names == [
        "host", "latency_ms_median", "keepalive_max", "rate_limit_rps", "ban_status",
        "robots_disallow", "crawl_delay_s", "pages",
    ]  # fmt: skip
    hosts = exported["hosts"].to_pydict()
    assert hosts["host"][0] == f"127.0.1.1:{sim.port}"
    assert hosts["rate_limit_rps"] == [None, None, None]
    assert hosts["robots_disallow"] == [None, "/private/", "/private/"]
    assert hosts["crawl_delay_s"] == [None, None, 0.05]
    pages = exported["pages"]
    assert pages.num_rows == 200 and sum(pages.column("pagerank").to_pylist()) == pytest.approx(1)
    links = exported["links"].to_pylist()
    assert len(links) == len({(r["src_url"], r["dst_url"]) for r in links})
    sim.export(tmp_path)
    meta = pq.ParquetFile(tmp_path / "links.parquet").metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"


@pytest.mark.integration
def test_robots_txt(sim):
    disallowed = sim.disallowed_urls()
    assert len(disallowed) == 3
    assert requests.get(sim.host_urls[0] + "robots.txt").status_code == 404
    for i, delay in ((1, None), (2, 0.05)):
        response = requests.get(sim.host_urls[i] + "robots.txt")
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        robots = Protego.parse(response.text)
        assert robots.crawl_delay("crawlflow") == delay
        assert not robots.can_fetch(sim.host_urls[i] + "anything", "BadBot")
        for page in range(sim.web.host_start[i], sim.web.host_start[i + 1]):
            url = sim.url_of(page)
            assert robots.can_fetch(url, "crawlflow") == (url not in disallowed)


@pytest.mark.integration
def test_reachable_allowed_urls_matches_the_links_export(sim, exported):
    links = _links_by_src(exported)
    pages = exported["pages"].to_pydict()
    blocked = {u for u, ok in zip(pages["url"], pages["robots_allowed"], strict=True) if not ok}
    assert blocked == sim.disallowed_urls()
    seen, queue = {sim.hub_url}, [sim.hub_url]
    while queue:
        url = queue.pop()
        for target in links.get(url, ()):
            if target not in seen:
                seen.add(target)
                if target not in blocked:
                    queue.append(target)
    expected = seen - blocked
    reachable = sim.reachable_allowed_urls()
    assert reachable == expected and sim.hub_url in reachable
    assert reachable.isdisjoint(sim.disallowed_urls())
    # From one host's root only (no hub), fewer pages but still only allowed ones.
    from_root = sim.reachable_allowed_urls([sim.host_urls[1]])
    assert sim.host_urls[1] in from_root and sim.hub_url not in from_root
    assert from_root <= reachable


@pytest.mark.integration
def test_request_handling_details(sim):
    sim.request_log(clear=True)
    listing = next(i for i, p in enumerate(sim.web.paths) if "?" in p)
    path, query = sim.url_of(listing).split("?")
    unsorted = requests.get(path + "?" + "&".join(reversed(query.split("&"))))
    assert unsorted.content == requests.get(sim.url_of(listing)).content
    assert requests.get(sim.host_urls[0] + "no/such/page").status_code == 404
    head = requests.head(sim.url_of(1))
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["Content-Length"]) == len(requests.get(sim.url_of(1)).content)
    log = sim.request_log()
    assert [(e["method"], e["status"]) for e in log] == [
        ("GET", 200), ("GET", 200), ("GET", 404), ("HEAD", 200), ("GET", 200),
    ]  # fmt: skip
    assert log[0]["path"].startswith("/list?sort=") and log[0]["host"] == urlsplit(path).netloc
    assert all(abs(e["time"] - time.time()) < 60 for e in log)
    assert sim.request_log(clear=True) == log and sim.request_log() == []


# -- limits: keep-alive, rate, latency, lifecycle ----------------------------------------------


def _raw_get(sock: socket.socket, host: str, path: str) -> tuple[int, dict[str, str], bytes]:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, body


@pytest.mark.integration
def test_keepalive_limit_and_rate_limit():
    spec = WebSpec(
        hosts=2,
        pages=50,
        latency_ms=(0.0, 0.0),
        keepalive_max=(3,),
        keepalive_weights=(1.0,),
        rate_limit_rps=(5.0, 5.0),
    )
    with WebSim(spec) as sim:
        host = urlsplit(sim.host_urls[1]).netloc
        with socket.create_connection(("127.0.1.2", sim.port), timeout=5) as sock:
            answers = [_raw_get(sock, host, "/") for _ in range(3)]
            assert [a[1]["connection"] for a in answers] == ["keep-alive", "keep-alive", "close"]
            assert answers[0][1]["keep-alive"] == "max=2"
            assert sock.recv(1) == b""  # the server closed after the third request
        log = sim.request_log(clear=True)
        assert len({e["conn"] for e in log}) == 1 and len(log) == 3

        ban = sim.web.hosts[1].ban_status
        session = requests.Session()
        statuses = []
        for _ in range(40):  # bucket holds 5 tokens and refills at 5/s: this overruns it
            response = session.get(sim.host_urls[1])
            statuses.append(response.status_code)
            if response.status_code != 200:
                assert response.status_code == ban
                assert int(response.headers["Retry-After"]) >= 1
                break
        # The three keep-alive requests above took 3 of the bucket's 5 tokens.
        assert statuses[-1] == ban and statuses.count(200) >= 2
        # robots.txt is never rate limited: a crawler must be able to read the rules.
        assert session.get(sim.host_urls[1] + "robots.txt").status_code in (200, 404)


@pytest.mark.integration
def test_latency_delays_responses_without_blocking_others():
    spec = WebSpec(
        hosts=4, pages=40, latency_ms=(500.0, 500.0), latency_sigma=0.0, rate_limit_rps=None
    )
    with WebSim(spec) as sim:
        started = time.monotonic()
        requests.get(sim.host_urls[0])
        assert time.monotonic() - started >= 0.49
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(requests.get, sim.host_urls * 2))
        assert [r.status_code for r in responses] == [200] * 8
        assert time.monotonic() - started < 2.0  # 8 x 500 ms in parallel: 4 s in series


@pytest.mark.integration
def test_a_static_web_serves_the_pages_it_rendered_at_start():
    with WebSim(replace(SMALL, static=True)) as static:
        renderer = Renderer(static.web, static.port)
        for page in range(0, SMALL.pages, 7):
            assert requests.get(static.url_of(page)).content == renderer.page(page)


@pytest.mark.integration
def test_stop_frees_the_port_and_a_fixed_port_works():
    with WebSim(WebSpec(hosts=2, pages=10)) as first:
        port = first.port
    assert not first.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.1.1", port), timeout=1)
    with WebSim(WebSpec(hosts=2, pages=10), port=port) as second:
        assert second.port == port
        assert requests.get(second.host_urls[1]).status_code in (200, 429, 503)


@pytest.mark.integration
def test_server_dies_with_its_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import time
            from websim import WebSim, WebSpec

            if __name__ == "__main__":
                sim = WebSim(WebSpec(hosts=1, pages=5)).start()
                print(sim.pid, sim.port, flush=True)
                time.sleep(60)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO
    )
    try:
        child_pid, port = map(int, parent.stdout.readline().split())
        socket.create_connection(("127.0.1.1", port), timeout=2).close()
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child_pid):
        assert time.monotonic() < deadline, "websim server outlived its parent"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Running and not a zombie (a container's init may be slow to reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# -- degrading hosts (websim/queueing.py) -----------------------------------------------------


def test_queueing_model_ground_truth():
    model = QueueingModel(latency_s=0.01, capacity_rps=10.0)
    assert model.unloaded_rtt_s == pytest.approx(0.11)
    for factor in (1.5, 2.0, 3.0):
        rate = model.rate_at_inflation(factor)
        assert 0 < rate < 10.0
        assert model.median_rtt_s(rate) == pytest.approx(factor * model.unloaded_rtt_s)
    assert model.rate_at_inflation(1.5) < model.rate_at_inflation(2.0)
    # Past the capacity the queue would grow without bound: capped, far past any timeout.
    assert model.median_rtt_s(50.0) == pytest.approx(0.01 + 0.1 / (1 - MAX_UTILIZATION))


def test_arrival_rate_reads_a_steady_stream_and_forgets_a_pause():
    rate = ArrivalRate(window_s=1.0)
    assert rate.arrive(0.0) == 0.0  # the first request meets an idle host
    readings = [rate.arrive(0.1 * i) for i in range(1, 100)]
    assert readings[-1] == pytest.approx(10.0, rel=1e-3)
    assert rate.arrive(9.9 + 5.0) < 0.5  # five windows idle


def test_degrading_hosts_are_drawn_apart_from_the_rest_of_the_web():
    plain = build_web(WebSpec(hosts=20, pages=200, seed=4))
    degrading = build_web(WebSpec(hosts=20, pages=200, seed=4, capacity_rps=(2.0, 20.0)))
    assert all(h.capacity_rps is None and h.queueing() is None for h in plain.hosts)
    assert all(2.0 <= h.capacity_rps <= 20.0 for h in degrading.hosts)
    # Everything else about the web is unchanged.
    assert [replace(h, capacity_rps=None) for h in degrading.hosts] == plain.hosts
    assert plain.paths == degrading.paths
    with pytest.raises(ValueError, match="capacity_rps"):
        WebSpec(capacity_rps=(5.0, 1.0))


@pytest.mark.integration
def test_a_degrading_host_answers_slower_under_load_and_never_says_no():
    spec = WebSpec(
        hosts=1,
        pages=30,
        latency_ms=(1.0, 1.0),
        latency_sigma=0.0,
        rate_limit_rps=None,
        capacity_rps=(20.0, 20.0),  # 50 ms of service per request
    )
    with WebSim(spec) as sim:
        model = sim.web.hosts[0].queueing()
        assert model is not None
        session = requests.Session()
        session.get(sim.host_urls[0])  # the connection is open; the host saw one request
        time.sleep(3.0)  # idle for three windows: unloaded again
        started = time.monotonic()
        first = session.get(sim.host_urls[0])
        unloaded = time.monotonic() - started
        # Back to back on one connection: the host sees its own answers' pace as load.
        started = time.monotonic()
        answers = [session.get(sim.host_urls[0]) for _ in range(20)]
        loaded = (time.monotonic() - started) / 20
    assert [a.status_code for a in [first, *answers]] == [200] * 21
    assert unloaded >= model.unloaded_rtt_s * 0.95
    # Back to back settles where rate = 1/RTT(rate): at least 1.4x the unloaded RTT here
    # (m = 1 ms, s = 50 ms: rho = 0.49), however slow the client is.
    assert loaded >= 1.4 * model.unloaded_rtt_s


def test_oracle_crawl_delay_holds_each_degrading_host_at_an_inflation():
    # bench/politeness's baseline: the same web, each host asking for Crawl-delay = 1 / the
    # rate at which its median response time reaches 1.5x the unloaded one.
    spec = WebSpec(hosts=12, pages=300, seed=4, capacity_rps=(2.0, 20.0), crawl_delay_share=0)
    plain = build_web(spec)
    held = build_web(replace(spec, crawl_delay_at_inflation=1.5))
    renderer = Renderer(held, port=80)
    for i, (before, after) in enumerate(zip(plain.hosts, held.hosts, strict=True)):
        model = after.queueing()
        assert model is not None and before.crawl_delay_s is None
        assert after.crawl_delay_s == pytest.approx(1 / model.rate_at_inflation(1.5))
        assert replace(after, crawl_delay_s=None) == before
        robots = Protego.parse(renderer.robots(i).decode())
        assert robots.crawl_delay("crawlflow") == pytest.approx(after.crawl_delay_s, rel=1e-5)
        assert robots.can_fetch(f"http://{after.address}/private/x", "crawlflow") == (
            after.robots_disallow is None
        )
    assert held.allowed.tolist() == plain.allowed.tolist()
    with pytest.raises(ValueError, match="crawl_delay_at_inflation"):
        WebSpec(crawl_delay_at_inflation=1.5)  # no degrading hosts
