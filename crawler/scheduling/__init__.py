"""Which server and URL come next: the servers' state (`server`) and URL queues (`urlqueue`),
the frontier (`frontier`) ranked by a scheduling policy (`policies`), page quality
(`quality`) and the recrawl's revisit order (`recrawl`)."""
