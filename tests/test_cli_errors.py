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


def config_error(tmp_path, capsys, toml: str) -> str:
    """`crawl --config` with `toml`: checks that it exits 2 with one line, and returns it."""
    config = tmp_path / "crawl.toml"
    config.write_text(toml + "\n")
    code, err = run(["crawl", "--config", str(config), "http://example.com/"], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    return err.strip()


def test_bad_config_values_are_named(tmp_path, capsys):
    err = config_error(tmp_path, capsys, "[scheduling]\nmax_connections = -3\nno_such_setting = 1")
    assert "max_connections" in err or "no_such_setting" in err


def test_an_unknown_key_gets_the_closest_known_one(tmp_path, capsys):
    err = config_error(tmp_path, capsys, '[fetch]\nuser_agnet = "bot"')
    expected = "invalid config: unknown key fetch.user_agnet (did you mean user_agent?)"
    assert err == f"crawlflow: error: {expected}"


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
    assert "strip_params" in config_error(tmp_path, capsys, f"[limits]\nstrip_params = {names}")


@pytest.fixture
def requests(monkeypatch) -> list:
    """The requests the command would run the flow on: it stops there (as if interrupted)."""
    import crawlflow.boot

    asked: list = []

    def capture(request) -> dict:
        asked.append(request)
        raise KeyboardInterrupt  # stop before the flow: these tests are about the request

    monkeypatch.setattr(crawlflow.boot, "run_crawl", capture)
    return asked


def test_the_command_builds_one_request_from_file_and_options(tmp_path, capsys, requests):
    """Options lay over the config file, table by table; the flow gets the validated request."""
    config = tmp_path / "crawl.toml"
    config.write_text(
        '[scheduling]\npolicy = "bfs"\nmax_connections = 7\n[rate_control]\nmode = "fixed"\n'
    )
    argv = ["crawl", "http://127.0.0.1:9/", "--allow-private", "--config", str(config)]
    argv += ["--rate-control", "pid", "--target-ppm", "30", "--max-pages", "5", "--full"]
    argv += ["--max-depth", "2", "--deadline", "60"]
    code, _ = run(argv, capsys)
    assert code == 130
    (request,) = requests
    assert (request.incremental, request.allow_private) == (False, True)
    limits = request.config.limits
    assert (limits.max_pages, limits.max_depth, limits.deadline_s) == (5, 2, 60.0)
    assert (request.config.scheduling.policy, request.config.scheduling.max_connections) == (
        "bfs",
        7,
    )
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

    with pytest.raises(ConfigError, match="invalid crawl request: since names"):
        crawl_request({"seeds": ["http://example.com/"], "since": "x", "incremental": False})
    with pytest.raises(ConfigError, match="invalid config: scheduling.max_connections"):
        crawl_request(
            {"seeds": ["http://example.com/"], "config": {"scheduling": {"max_connections": 0}}}
        )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("connect_timeout_s = 1.0", "invalid config: connect_timeout_s moved to [fetch]"),
        ("policy = 'bfs'", "invalid config: policy moved to [scheduling]"),
        ("exchange_batch = 10", "invalid config: exchange_batch moved to [exchange] as batch"),
        ("dedup_shards = 2", "invalid config: dedup_shards moved to [dedup] as shards"),
        ("time_budget_s = 60", "invalid config: time_budget_s moved to [limits] as deadline_s"),
    ],
)
def test_a_key_of_the_flat_layout_names_its_new_place(tmp_path, capsys, line, message):
    assert config_error(tmp_path, capsys, line) == f"crawlflow: error: {message}"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[limits]\ntime_budget_s = 60", "limits.time_budget_s is now limits.deadline_s"),
        ("[rate_control]\nkp = -0.05", "rate_control.kp moved to [rate_control.pid]"),
        (
            '[rate_control]\nmode = "rtt"\nrtt_max_cap = 4',
            "rate_control.rtt_max_cap moved to [rate_control.rtt] as max_cap",
        ),
        (
            '[rate_control]\nmode = "adaptive"\n[rate_control.pid]\nkp = -0.05',
            'rate_control.pid is set but rate_control.mode is "adaptive"',
        ),
        (
            "[rate_control]\ntarget_ppm = 30.0",
            'rate_control.target_ppm is set but rate_control.mode "adaptive" does not read it',
        ),
    ],
)
def test_a_key_of_an_older_layout_or_of_another_law_is_one_line(tmp_path, capsys, table, message):
    assert config_error(tmp_path, capsys, table) == f"crawlflow: error: invalid config: {message}"


def test_the_limits_of_a_config_file_reach_the_request(tmp_path, capsys, requests):
    config = tmp_path / "crawl.toml"
    config.write_text(
        "[limits]\nmax_pages = 9\nmax_depth = 3\ndeadline_s = 90\n"
        '[rate_control]\nmode = "rtt"\n[rate_control.rtt]\nmax_cap = 6\n'
    )
    argv = ["crawl", "http://127.0.0.1:9/", "--allow-private", "--config", str(config)]
    code, _ = run(argv + ["--max-pages", "4"], capsys)
    assert code == 130
    (request,) = requests
    limits = request.config.limits
    assert (limits.max_pages, limits.max_depth, limits.deadline_s) == (4, 3, 90.0)
    assert request.config.rate_control.rtt.max_cap == 6


@pytest.mark.parametrize("name", ["max_pages", "max_depth"])
def test_a_request_with_the_limits_at_its_top_names_their_new_place(name):
    from crawler.config import ConfigError
    from crawler.request import crawl_request

    with pytest.raises(ConfigError) as error:
        crawl_request({"seeds": ["http://example.com/"], name: 5})
    expected = f"invalid crawl request: {name} moved to config.limits.{name}"
    assert str(error.value) == expected


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            "[exchange]\nbatch = true",
            "invalid config: exchange.batch: Input should be a valid integer",
        ),
        (
            "[fetch]\nread_timeout_s = inf",
            "invalid config: fetch.read_timeout_s: Input should be a finite number",
        ),
        (
            "[limits]\nmax_pages_per_host = '7'",
            "invalid config: limits.max_pages_per_host: Input should be a valid integer",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_a_one_line_error(tmp_path, capsys, table, message):
    # Every section is strict: `true` is not 1, "7" is not 7, inf is no timeout.
    assert config_error(tmp_path, capsys, table) == f"crawlflow: error: {message}"


def test_the_request_checks_the_quality_file_and_since_for_the_command(tmp_path, capsys):
    # One check each, in the settings and the request model; the command only reports them.
    missing = tmp_path / "quality.csv"
    code, err = run(["crawl", "--quality-file", str(missing), "http://example.com/"], capsys)
    assert code == 2
    expected = f"invalid config: scheduling.quality_file: no such file: {missing}"
    assert err.strip() == f"crawlflow: error: {expected}"
    code, err = run(["crawl", "--since", "x", "--full", "http://example.com/"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "since names a crawl to revisit, but incremental is off (--full)" in err


# Every key of the flat layout (crawlflow before the settings tree), rate_control and retry
# aside (they were tables already).
FLAT_KEYS = [
    "user_agent",
    "max_connections",
    "requests_per_connection",
    "policy",
    "quality_file",
    "keepalive_speedup",
    "estimate_weight",
    "connect_timeout_s",
    "read_timeout_s",
    "max_body_bytes",
    "max_decoded_bytes",
    "fetch_timeout_s",
    "max_redirects",
    "max_url_length",
    "max_pages_per_host",
    "strip_params",
    "trap_max_urls_per_pattern",
    "max_depth_per_host",
    "family_error_budget",
    "trap_max_segment_repeats",
    "robots_retry_s",
    "metrics_interval_s",
    "warc",
    "sitemaps",
    "write_batch_rows",
    "write_interval_s",
    "exchange_batch",
    "heartbeat_s",
    "throughput_window",
    "balance",
    "balance_tolerance",
    "dedup_cache_size",
    "dedup_expected_urls",
    "dedup_fp_rate",
    "dedup_shards",
    "shared_state_delay_s",
    "surcharge_max_nodes",
    "surcharge_check_s",
    "time_budget_s",
    "expected_pages_per_host",
    "expected_page_kb",
    "expected_pages_per_s_per_host",
    "resume_quiet_s",
]


@pytest.mark.parametrize("key", FLAT_KEYS)
def test_every_key_of_the_flat_layout_has_a_place_in_the_tree(key):
    from crawler.config import ConfigError, CrawlConfig, config_from_dict

    with pytest.raises(ConfigError, match=rf"^invalid config: {key} moved to \[(\w+)\]") as error:
        config_from_dict({key: None})
    section, _, renamed = str(error.value).partition(" moved to [")[2].partition("]")
    name = renamed.removeprefix(" as ") or key
    assert name in type(getattr(CrawlConfig(), section)).model_fields


@pytest.fixture
def hostile_inputs(tmp_path, monkeypatch):
    """Files a careless or hostile user may hand the command, in the working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    (tmp_path / "latin1.toml").write_bytes(b'[fetch]\nuser_agent = "b\xf6t"\n')
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "crlf.toml").write_text('[fetch]\nuser_agent = "bot\\r\\nX-Evil: 1"\n')
    (tmp_path / "binary.json").write_bytes(bytes(range(256)))
    (tmp_path / "cut" / "fetches").mkdir(parents=True)
    (tmp_path / "cut" / "fetches" / "node-0-000001.parquet").write_bytes(b"PAR1 cut short")
    return tmp_path


SEED = "http://127.0.0.1:9/"  # loopback, nothing listens; every case stops before a request


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["crawl", SEED, "--allow-private", "--out", "a-file"], "--out a-file is not a directory"),
        (["crawl", SEED, "--allow-private", "--out", "/proc/no/such"], "cannot write there"),
        (["crawl", SEED, "--config", "latin1.toml"], "not UTF-8"),
        (["crawl", SEED, "--config", "deep.json"], "nested too deeply"),
        (["crawl", SEED, "--allow-private", "--config", "crlf.toml"], "printable ASCII"),
        (["crawl", "http://" + "a" * 64 + ".example/"], "not a valid DNS name"),
        (["crawl", "http://bob:pw@127.0.0.1:9/", "--allow-private"], "carries credentials"),
        (["crawl", SEED, "--allow-private", "--crawl-id", "../up"], "is not a crawl id"),
        (["sql", "cut", "SELECT count(*) FROM fetches"], "cannot read fetches"),
        (["sql", "cut", "  "], "the SQL query is empty"),
        (["report", "cut"], "cannot read fetches"),
        (["warc-get", "cut", SEED], "cannot read fetches"),
        (["plan", "--instance", "binary.json"], "not UTF-8"),
    ],
)
def test_hostile_input_is_one_line_before_anything_starts(hostile_inputs, argv, fragment, capsys):
    code, err = run(argv, capsys)
    assert "Traceback" not in err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("crawlflow: error: ") and fragment in err
