"""Talking to one server and reading what it said: the HTTP fetcher (`fetcher`), robots.txt
and retries (`politeness`), sitemaps (`sitemaps`) and link extraction (`links`). Per-server
pacing is `crawler.ratecontrol`; the WARC records of an exchange, `crawler.node.archive`."""
