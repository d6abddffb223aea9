"""Nodes as peers: the coordinator (`coordinator`), the shared task exchange (`exchange`) and a
node's link to it (`peerlink`), the shared URL filter (`dedup`), and the takeover of a dead
node's servers (`recovery`)."""
