"""Page quality: incremental PageRank over the discovered graph, and score files."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crawler.scheduling.quality import (
    FileQuality,
    NoQuality,
    PageRankQuality,
    load_quality_file,
    make_quality_model,
)
from websim import WebSpec, build_web
from websim.graph import pagerank, unique_pairs


def test_pagerank_of_a_fully_observed_graph_matches_the_reference():
    web = build_web(WebSpec(hosts=4, pages=400, seed=2))
    model = PageRankQuality(min_links=10**9, tolerance=1e-12, max_iterations=500)
    for page in range(web.n_pages):
        targets = dict.fromkeys(f"p{t}" for t in web.out_links(page).tolist())
        model.observe_page(f"p{page}", list(targets))
    model._compute()
    src, dst = unique_pairs(
        np.repeat(np.arange(web.n_pages), np.diff(web.out_ptr)), web.out_dst, web.n_pages
    )
    reference = pagerank(src, dst, web.n_pages)
    ours = np.array([model.importance(f"p{p}") for p in range(web.n_pages)]) / web.n_pages
    assert np.abs(ours - reference).max() < 1e-9


def test_a_new_url_scores_what_its_first_in_link_gives_and_keeps_it():
    model = PageRankQuality(min_links=10**9)
    model.observe_page("a", ["b", "c", "d", "e"])
    # a is an unknown source: importance 1 (an average page), spread over 4 links.
    assert model.score("b") == pytest.approx(0.15 + 0.85 * 1.0 / 4)
    model.observe_page("x", ["b"])  # a second in-link does not change a discovered URL
    assert model.score("b") == pytest.approx(0.15 + 0.85 / 4)
    assert model.score("never-seen") == 1.0


def test_sources_carry_their_pagerank_to_the_urls_they_reveal():
    model = PageRankQuality(min_links=1)
    model.observe_page("hub", [f"leaf{i}" for i in range(3)])
    for i in range(3):
        model.observe_page(f"leaf{i}", ["star"])  # star gets every leaf's rank
    model.observe_page("star", ["s-child"])
    model.observe_page("leaf0", ["l-child"])
    assert model.computations >= 1
    assert model.importance("star") > model.importance("leaf0")
    assert model.score("s-child") > model.score("l-child")


def test_recomputation_is_geometric():
    model = PageRankQuality(min_links=100, growth=0.5)
    for page in range(2000):
        model.observe_page(f"p{page}", [f"p{page + 1}", f"p{(page * 7) % 2000}"])
    # 100, 150, 225, ... up to 4000 links: about 9 runs, not one per page.
    assert 5 <= model.computations <= 12
    assert len(model) == 2001


def test_quality_file_csv_and_parquet(tmp_path):
    csv = tmp_path / "q.csv"
    csv.write_text("url,quality\nHTTP://Example.com:80/a?b=2&a=1,0.5\nhttp://example.com/z,2\n")
    model = FileQuality(csv)
    assert model.score("http://example.com/a?a=1&b=2") == 0.5  # canonicalized as the crawler
    assert model.score("http://example.com/z") == 2.0
    assert model.score("http://example.com/missing") == 0.0
    parquet = tmp_path / "q.parquet"
    pq.write_table(pa.table({"url": ["http://example.com/p"], "quality": [3.0]}), parquet)
    assert load_quality_file(parquet) == {"http://example.com/p": 3.0}


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("q.txt", "url,quality\n", "must end in"),
        ("q.csv", "address,score\nhttp://a/,1\n", "cannot read"),
        ("q.csv", "url,quality\nhttp://a/,\n", "finite quality"),
        ("q.csv", "url,quality\nhttp://a/,nan\n", "finite quality"),
        ("q.csv", "url,quality\nmailto:x@y,1\n", "quality file"),
        ("missing.csv", None, "cannot read"),
    ],
)
def test_bad_quality_files(tmp_path, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_quality_file(path)


def test_model_per_policy(tmp_path):
    csv = tmp_path / "q.csv"
    csv.write_text("url,quality\n")
    assert isinstance(make_quality_model("bfs", str(csv)), NoQuality)
    assert isinstance(make_quality_model("performance", None), NoQuality)
    assert isinstance(make_quality_model("quality", str(csv)), FileQuality)
    assert isinstance(make_quality_model("capability", None), PageRankQuality)
