"""The crawler node (crawler/node/control.py), what it is built from and what it reports."""

from crawler.cluster.status import NodeStatus
from crawler.node.control import CrawlerNode
from crawler.node.settings import NodeSettings

__all__ = ["CrawlerNode", "NodeSettings", "NodeStatus"]
