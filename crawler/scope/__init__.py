"""Which URLs a crawl may fetch: canonical URLs (`urls`), seeds and the crawl's servers
(`seeds`), the address guard (`addresses`), per-server limits (`limits`) and link traps
(`traps`)."""
