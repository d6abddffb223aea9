"""The command line fuzzed: generated argument lists and settings files go through the real
entry point (`crawlflow.cli.main`), and every outcome is exit 0, or exit 2 with one line
`crawlflow: error: ...`, never a traceback.

What would start a crawl is stopped at the door: `run_crawl` is replaced by a stub, so a
command line that passes every check ends there (the checks are what is fuzzed). Name
resolution is replaced too: a generated host name must never reach a DNS server.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.config import CrawlConfig
from crawlflow import boot, cli
from storage.schema import FETCHES
from storage.writer import ParquetDatasetWriter


class CrawlWouldStart(Exception):
    """Every check passed: the stub of `run_crawl` was reached."""


def refuse_to_resolve(host, *args, **kwargs):
    raise socket.gaierror(socket.EAI_NONAME, "resolution is off in this test")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Files and directories the generated command lines name (relative to it)."""
    root = tmp_path_factory.mktemp("cli-fuzz")
    (root / "a-file").write_text("not a directory")
    (root / "binary.json").write_bytes(bytes(range(256)) * 4)
    (root / "good.toml").write_text('[fetch]\nuser_agent = "fuzzbot/1.0"\n')
    (root / "empty.toml").write_text("")
    (root / "instance.json").write_text('{"tasks": [], "nodes": []}')
    crawl = root / "out" / "night-1"
    writer = ParquetDatasetWriter(crawl / "fetches", FETCHES, "node-0", 1, 3600)
    writer.write(
        {
            "crawl_id": "night-1",
            "url": "http://127.0.0.1:9/",
            "url_host_name": "127.0.0.1:9",
            "fetch_time": datetime.now(UTC),
            "fetch_status": 200,
            "node_id": "node-0",
            "depth": 0,
            "attempt": 1,
        }
    )
    writer.flush()
    (root / "truncated" / "fetches").mkdir(parents=True)
    (root / "truncated" / "fetches" / "node-0-000001.parquet").write_bytes(b"PAR1\x00\x01")
    (root / "it's [1]").mkdir()
    # Seed files and scope settings of every kind (issue 30).
    (root / "seeds.txt").write_text("# seeds\nhttp://127.0.0.1:9/\nnot a url\n")
    (root / "seeds.csv").write_text("url\nhttp://127.0.0.1:9/\n")
    (root / "seeds-empty.txt").write_text("")
    (root / "bad-regex.toml").write_text('[scope]\nexclude = ["(unclosed"]\n')
    (root / "bad-mode.toml").write_text('[scope]\nmode = "subdomains"\n')
    (root / "resolve.toml").write_text('[fetch.resolve]\n"a.example" = "127.0.0.1"\n')
    (root / "read-only").mkdir()
    (root / "read-only").chmod(0o555)
    return root


@pytest.fixture
def entry_point(workdir, monkeypatch):
    """Runs one command line in `workdir`; returns its exit code and stderr."""
    monkeypatch.chdir(workdir)
    monkeypatch.setattr(socket, "getaddrinfo", refuse_to_resolve)

    def stop(request):
        raise CrawlWouldStart

    monkeypatch.setattr(boot, "run_crawl", stop)

    def run(argv: list[str]) -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                cli.main(argv)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
            except CrawlWouldStart:
                code = 0
        return code, err.getvalue()

    return run


def assert_clean(code: int, err: str) -> None:
    assert "Traceback" not in err, err
    if code == 0:
        return
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("crawlflow: error: "), err


PATHS = st.sampled_from(
    [
        "out",
        "out/night-1",
        "a-file",
        "binary.json",
        "good.toml",
        "empty.toml",
        "instance.json",
        "truncated",
        "it's [1]",
        "missing",
        "",
        ".",
        "/proc/nope",
        "out/../out",
        "a-file/below",
        "seeds.txt",
        "seeds.csv",
        "seeds-empty.txt",
        "bad-regex.toml",
        "bad-mode.toml",
        "resolve.toml",
        "read-only/out",
    ]
)
SEEDS = st.one_of(
    st.sampled_from(
        [
            "http://127.0.0.1:9/",
            "http://[::1]:9/x",
            "https://127.0.0.2/",
            "http://",
            "ftp://x/",
            "http://user:pw@127.0.0.1:9/",
            "http://" + "a" * 64 + ".example/",
            "http://a..b/",
            "http://127.0.0.1:99999/",
            "http://[::1/",
            "//127.0.0.1/",
            "http://0x7f.1/",
            "http://2002:7f00:1::1/",
            "http://[2002:7f00:1::1]/",
            "http://127.0.0.1:9/" + "p" * 3000,
            "*.example.org",
            "example.org/docs/",
            "*example.org",
            "http://127.0.0.1:9/docs/",
        ]
    ),
    st.text(max_size=40),
)
NUMBERS = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", "x", "1e999", "-0", "0x10", " 5"]),
)
CRAWL_OPTIONS = st.one_of(
    st.tuples(st.just("--allow"), st.one_of(SEEDS, st.text(max_size=20))),
    st.just(("--allow-private",)),
    st.just(("--full",)),
    st.tuples(
        st.sampled_from(["--max-pages", "--max-depth", "--nodes", "--deadline", "--target-ppm"]),
        NUMBERS,
    ),
    st.tuples(st.sampled_from(["--out", "--config", "--quality-file", "--seeds"]), PATHS),
    st.tuples(
        st.sampled_from(["--crawl-id", "--since"]),
        st.one_of(
            st.sampled_from(["night-1", "../x", ".h", "a/b", "x" * 101]), st.text(max_size=20)
        ),
    ),
    st.tuples(
        st.sampled_from(["--rate-control", "--policy"]),
        st.sampled_from(["adaptive", "pid", "rtt", "fixed", "bfs", "quality", "nope", ""]),
    ),
    st.tuples(st.text(min_size=1, max_size=12)),
)
QUERIES = st.sampled_from(
    [
        "SELECT count(*) FROM fetches",
        "SELECT * FROM pages",
        "SELEC",
        "",
        "SELECT 1/0",
        "SELECT * FROM nonexistent",
        "SELECT url FROM fetches WHERE url = 'it''s'",
    ]
)
COMMAND_LINES = st.one_of(
    st.builds(
        lambda seeds, options: ["crawl", *seeds, *[part for option in options for part in option]],
        st.lists(SEEDS, max_size=3),
        st.lists(CRAWL_OPTIONS, max_size=5),
    ),
    st.builds(lambda path: ["report", path], PATHS),
    st.builds(lambda path, query: ["sql", path, query], PATHS, QUERIES),
    st.builds(lambda path, url: ["warc-get", path, url], PATHS, SEEDS),
    st.builds(lambda path, out: ["plan", "--instance", path, "--json", out], PATHS, PATHS),
    st.lists(st.text(max_size=15), max_size=4),
)


# The fixture is the same for every example on purpose: the files and the stubs do not change.
SAME_FIXTURE = [HealthCheck.function_scoped_fixture]


@settings(max_examples=1500, deadline=None, suppress_health_check=SAME_FIXTURE)
@given(argv=COMMAND_LINES)
def test_any_command_line_ends_in_exit_0_or_one_line(entry_point, argv):
    assert_clean(*entry_point(argv))


SECTIONS = list(CrawlConfig.model_fields)
VALUES = st.recursive(
    st.one_of(
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.text(max_size=20),
        st.floats(allow_nan=False),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
KEYS = st.one_of(
    st.sampled_from(
        sorted(
            {
                key
                for section in SECTIONS
                for key in getattr(CrawlConfig.model_fields[section].annotation, "model_fields", {})
            }
        )
    ),
    st.text(min_size=1, max_size=12),
)
SETTINGS = st.dictionaries(
    st.one_of(st.sampled_from(SECTIONS), st.text(min_size=1, max_size=10)),
    st.one_of(st.dictionaries(KEYS, VALUES, max_size=4), VALUES),
    max_size=4,
)


@settings(max_examples=1000, deadline=None, suppress_health_check=SAME_FIXTURE)
@given(
    file=st.one_of(
        SETTINGS.map(lambda data: ("fuzzed.json", json.dumps(data))),
        st.text(max_size=200).map(lambda text: ("fuzzed.toml", text)),
        st.binary(max_size=200).map(lambda raw: ("fuzzed.toml", raw)),
    )
)
def test_any_settings_file_ends_in_exit_0_or_one_line(entry_point, workdir, file):
    name, content = file
    path = workdir / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    argv = ["crawl", "http://127.0.0.1:9/", "--allow-private", "--config", str(path)]
    assert_clean(*entry_point(argv))


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--out", "a-file"], "is not a directory"),
        (["--out", "a-file/below"], "cannot write there"),
        (["--seeds", "missing"], "cannot read seed file"),
        (["--seeds", "binary.json"], "is binary"),
        (["--seeds", "seeds-empty.txt"], "holds no URLs"),
        (["--config", "bad-regex.toml"], "scope.exclude: [0] '(unclosed' is not a regular"),
        (["--config", "bad-mode.toml"], "scope.mode"),
        (["--allow", "*example.org"], "the forms are"),
    ],
)
def test_each_bad_input_of_issue_30_is_one_line_before_anything_starts(entry_point, argv, fragment):
    code, err = entry_point(["crawl", "http://127.0.0.1:9/", "--allow-private", *argv])
    assert_clean(code, err)
    assert code == 2 and fragment in err, err


def test_a_seed_file_alone_reaches_the_start(entry_point):
    assert entry_point(["crawl", "--seeds", "seeds.txt", "--allow-private"]) == (0, "")
