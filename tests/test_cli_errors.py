"""Bad input on the command line: one line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import pytest

from crawlflow.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["crawl", "--bogus", "http://example.com/"], "No such option"),
        (["crawl", "ht!tp://nowhere"], "bad seed"),
        (["crawl", "http://"], "bad seed"),
        (["crawl", "--config", "/nonexistent/crawl.toml", "http://example.com/"], "config"),
        (["crawl", "--max-pages", "0", "http://example.com/"], "max-pages"),
        (["crawl", "--allow", "bad host:99999", "http://example.com/"], "--allow"),
        # A loopback literal is refused without resolving or connecting anywhere.
        (["crawl", "http://127.0.0.1:9/"], "loopback"),
        (["report", "/nonexistent/output"], "no such output directory"),
        (["frobnicate"], "No such command"),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(argv, fragment, capsys):
    code, err = run(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("crawlflow: error:")
    assert fragment in lines[0]
    assert "Traceback" not in err


def test_bad_config_values_are_named(tmp_path, capsys):
    config = tmp_path / "crawl.toml"
    config.write_text("max_connections = -3\nno_such_setting = 1\n")
    code, err = run(["crawl", "--config", str(config), "http://example.com/"], capsys)
    assert code == 2
    assert "max_connections" in err or "no_such_setting" in err
    assert len(err.strip().splitlines()) == 1


def test_sql_error_is_one_line(tmp_path, capsys):
    from storage.schema import FETCHES
    from storage.writer import ParquetDatasetWriter

    writer = ParquetDatasetWriter(tmp_path / "c1" / "fetches", FETCHES, "n", 10, 1.0)
    writer.write({"crawl_id": "c1", "url": "http://a/"})
    writer.flush()
    code, err = run(["sql", str(tmp_path), "SELEC nonsense"], capsys)
    assert code == 2
    assert err.startswith("crawlflow: error: SQL error")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("names", ['["*"]', '[""]', '["utm_*", "**"]'])
def test_strip_params_that_name_no_parameter_are_refused(tmp_path, capsys, names):
    config = tmp_path / "crawl.toml"
    config.write_text(f"strip_params = {names}\n")
    code, err = run(["crawl", "--config", str(config), "http://example.com/"], capsys)
    assert code == 2
    assert "strip_params" in err and len(err.strip().splitlines()) == 1


def test_the_command_builds_one_request_from_file_and_options(tmp_path, capsys, monkeypatch):
    """Options lay over the config file, table by table; the flow gets the validated request."""
    import crawlflow.runtime
    from crawler.request import CrawlRequest

    requests: list[CrawlRequest] = []

    def capture(request: CrawlRequest) -> dict:
        requests.append(request)
        raise KeyboardInterrupt  # stop before the flow: this test is about the request

    monkeypatch.setattr(crawlflow.runtime, "run_crawl", capture)
    config = tmp_path / "crawl.toml"
    config.write_text('policy = "bfs"\nmax_connections = 7\n[rate_control]\nmode = "fixed"\n')
    argv = ["crawl", "http://127.0.0.1:9/", "--allow-private", "--config", str(config)]
    argv += ["--rate-control", "pid", "--target-ppm", "30", "--max-pages", "5", "--full"]
    code, _ = run(argv, capsys)
    assert code == 130
    (request,) = requests
    assert (request.max_pages, request.incremental, request.allow_private) == (5, False, True)
    assert (request.config.policy, request.config.max_connections) == ("bfs", 7)
    assert (request.config.rate_control.mode, request.config.rate_control.target_ppm) == (
        "pid",
        30.0,
    )


@pytest.mark.parametrize(
    ("option", "fragment"),
    [("--rate-control", "'adaptive', 'pid', 'rtt', 'fixed'"), ("--policy", "'bfs'")],
)
def test_choices_come_from_the_code(option, fragment, capsys):
    code, err = run(["crawl", option, "nonsense", "http://example.com/"], capsys)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


def test_a_request_refuses_since_without_incremental():
    from crawler.config import ConfigError
    from crawler.request import crawl_request

    with pytest.raises(ConfigError, match="invalid crawl request: request: since"):
        crawl_request({"seeds": ["http://example.com/"], "since": "x", "incremental": False})
    with pytest.raises(ConfigError, match="invalid config: max_connections"):
        crawl_request({"seeds": ["http://example.com/"], "config": {"max_connections": 0}})
