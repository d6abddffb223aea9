"""The crawler node (crawler/node/control.py) and what it reports."""

from crawler.node.control import CrawlerNode
from crawler.node.status import NodeStatus

__all__ = ["CrawlerNode", "NodeStatus"]
