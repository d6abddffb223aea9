"""Seed files: text, CSV and Parquet; duplicates collapse after canonicalization; a malformed
line is set aside with its reason, never an abort; a file that cannot be read, or holds no
usable URL, is a one-line error; and the crawl starts if any seed at all is usable."""

from __future__ import annotations

import socket

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crawler.config import CrawlConfig
from crawler.scope.rules import ScopeSettings
from crawler.scope.seedfile import SeedError, read_seed_file
from crawler.scope.seeds import build_scope, check_seeds, check_usable
from tasks.allocate import expected_host_pages

TEXT = """# nightly seeds
http://Example.com/a#top
http://example.com:80/a

https://example.org/docs/?b=2&a=1
not a url
ftp://example.net/
http://user:secret@example.com/
https://example.org/docs/?a=1&b=2
"""


def test_a_text_file_collapses_duplicates_and_sets_malformed_lines_aside(tmp_path):
    path = tmp_path / "seeds.txt"
    path.write_text(TEXT)
    seeds = read_seed_file(path)
    assert seeds.urls == ["http://example.com/a", "https://example.org/docs/?a=1&b=2"]
    assert seeds.duplicates == 2
    assert [(seed.line, seed.text) for seed in seeds.rejected] == [
        (6, "not a url"),
        (7, "ftp://example.net/"),
        (8, "http://user:secret@example.com/"),
    ]
    assert "credentials" in seeds.rejected[2].reason
    assert seeds.examples(1) == [f"line 6: {seeds.rejected[0].reason}"]


def test_csv_and_parquet_files_read_their_url_column(tmp_path):
    csv_path = tmp_path / "seeds.csv"
    csv_path.write_text('name,URL\nhome,http://a.example/\nbad,"not, a url"\nnone,\n')
    seeds = read_seed_file(csv_path)
    assert seeds.urls == ["http://a.example/"]
    assert [seed.line for seed in seeds.rejected] == [3, 4]
    parquet_path = tmp_path / "seeds.parquet"
    pq.write_table(
        pa.table({"url": ["http://b.example/x", None, "http://B.example/x"], "n": [1, 2, 3]}),
        parquet_path,
    )
    seeds = read_seed_file(parquet_path)
    assert (seeds.urls, seeds.duplicates, len(seeds.rejected)) == (["http://b.example/x"], 1, 1)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.txt", None, "cannot read seed file"),
        ("binary.txt", bytes(range(256)), "is binary"),
        ("latin1.txt", "http://caf\xe9.example/".encode("latin-1"), "not UTF-8"),
        ("empty.txt", b"", "holds no URLs"),
        ("comments.txt", b"# nothing yet\n\n", "holds no URLs"),
        ("bad.txt", b"nope\nftp://x/\n", "no usable seed in .* 2 malformed .*line 1"),
        ("nocolumn.csv", b"link\nhttp://a.example/\n", "has no url column"),
        ("fake.parquet", b"PAR1 not really", "cannot read seed file .* as Parquet"),
    ],
)
def test_an_unusable_file_is_one_line(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SeedError, match=message) as caught:
        read_seed_file(path)
    assert "\n" not in str(caught.value)


def test_command_line_seeds_come_first_and_must_all_be_urls(tmp_path):
    path = tmp_path / "seeds.txt"
    path.write_text("http://b.example/\nhttp://a.example/\nnope\n")
    scope = build_scope(["http://a.example/"], str(path), ["*.c.example"], ScopeSettings())
    assert scope.seeds == ["http://a.example/", "http://b.example/"]
    assert (scope.duplicates, len(scope.rejected)) == (1, 1)
    assert scope.hosts == ["a.example", "b.example"]
    with pytest.raises(SeedError, match="bad seed: unsupported scheme in 'nope'"):
        build_scope(["http://a.example/", "nope"], None, [], ScopeSettings())


def test_the_crawl_starts_if_one_seed_is_usable_and_names_the_first_problem_if_none():
    asked = []

    def resolver(host, port):
        asked.append(host)
        if host.startswith("gone"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return ["93.184.216.34"]

    seeds = [f"http://gone{i}.example/" for i in range(40)] + ["http://ok.example/"]
    check_usable(seeds, allow_private=False, resolver=resolver)
    assert "ok.example" in asked
    with pytest.raises(SeedError, match="none of the 40 seeds is usable: seed http://gone0"):
        check_usable(seeds[:40], allow_private=False, resolver=resolver)
    with pytest.raises(SeedError, match="refused: .*loopback"):
        check_usable(["http://x.example/"], False, {"x.example": "127.0.0.2"}, resolver)


def test_the_command_reads_the_file_only_as_far_as_a_usable_seed(tmp_path, monkeypatch):
    from crawler.scope import seedfile

    path = tmp_path / "seeds.txt"
    path.write_text("nope\nhttp://ok.example/\n" + "http://later.example/\n" * 1000)
    taken = []
    real = seedfile.seed_url
    monkeypatch.setattr(seedfile, "seed_url", lambda text: taken.append(text) or real(text))
    check_seeds([], str(path), [], allow_private=True, resolve={"ok.example": "127.0.0.1"})
    assert taken == ["nope", "http://ok.example/"]  # up to the first usable seed
    empty = tmp_path / "empty.txt"
    empty.write_text("# none yet\n")
    with pytest.raises(SeedError, match="holds no URLs"):
        check_seeds(["http://ok.example/"], str(empty), [], True, {"ok.example": "127.0.0.1"})


def test_a_crawl_that_follows_no_link_is_planned_as_its_seeds(tmp_path):
    # 7 seeds on one server, 1 on another, and an --allow server without seeds.
    seeds = [f"http://big.example/{i}" for i in range(7)] + ["http://small.example/"]
    scope = build_scope(seeds, None, ["extra.example"], ScopeSettings())
    follows_none = CrawlConfig(limits={"max_depth": 0})
    pages, _ = expected_host_pages(scope, str(tmp_path), "c1", follows_none)
    assert pages == {"big.example": 7, "small.example": 1, "extra.example": 1}
    # Links followed (or sitemaps read): a new server is expected to have the config's pages.
    for config in (CrawlConfig(), CrawlConfig(limits={"max_depth": 0}, fetch={"sitemaps": True})):
        pages, _ = expected_host_pages(scope, str(tmp_path), "c1", config)
        assert set(pages.values()) == {config.plan.expected_pages_per_host}
