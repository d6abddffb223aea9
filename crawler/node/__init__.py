"""The crawler node (crawler/node/control.py), what it is built from and what it reports."""

from crawler.node.control import CrawlerNode
from crawler.node.settings import NodeSettings
from crawler.node.status import NodeStatus

__all__ = ["CrawlerNode", "NodeSettings", "NodeStatus"]
