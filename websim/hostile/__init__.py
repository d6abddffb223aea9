"""Hostile hosts: one misbehaving server per scenario, served next to the synthetic web.

A crawler talks to servers nobody controls. Each scenario named in `WebSpec.hostile` gets its
own loopback address (after the web's hosts, on the same port) and answers like one kind of
broken or malicious server: endless redirects, a 1 GB body, a gzip bomb, a body that drips a
byte a second, a connection reset mid-body, binary data labelled HTML, a link trap, ...

Every hostile host serves a root page `/` linking to three good pages `/ok/0` .. `/ok/2` and to
the scenario's own resources. `Scenario.expected` lists the paths a robust crawler fetches
with a 2xx answer and no error: the good pages unless the scenario puts the whole host off
limits (a robots.txt that fails), plus the scenario's pages that are fine despite their
hostility. Bodies of any size are generated while they are sent, never held in memory.

Modules: `exchange` (a request and the ways to answer it), `bodies` (hostile bodies and
encodings), `traps` (redirects, link traps, the documentation site and the hostile site),
`robots` (robots.txt and Retry-After), `scenarios` (the table of scenarios), `serving` (the
servers).
"""

from websim.hostile.scenarios import SCENARIOS, check_scenarios
from websim.hostile.serving import addresses, start
from websim.hostile.traps import ARCHIVE, DOC_PAGES

__all__ = ["ARCHIVE", "DOC_PAGES", "SCENARIOS", "addresses", "check_scenarios", "start"]
