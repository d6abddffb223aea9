"""`[content]` and `[extract]`: what the crawler reads out of a page besides its links."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

from cssselect import GenericTranslator, SelectorError
from lxml import etree
from pydantic import Field, field_validator, model_validator

from crawler.section import Section

_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


class ContentSettings(Section):
    """`[content]`: a page's main text, language and fingerprint, and which of its robots
    directives the crawl obeys (crawler/content/)."""

    main_text: bool = Field(
        True,
        description="extract each page's main text (pages.text), its language and its simhash",
    )
    honour_nofollow: bool = Field(
        True,
        description="follow no links of a page whose meta robots or X-Robots-Tag says "
        "nofollow, nor links marked rel=nofollow",
    )
    honour_noindex: bool = Field(
        True,
        description="store no content, text or extracts of a page whose meta robots or "
        "X-Robots-Tag says noindex (its row and head facts stay)",
    )


class ExtractSettings(Section):
    """`[extract]`: fields of your own, by CSS selector, XPath or a Python function, written to
    the `extracts` dataset (docs/extraction.md)."""

    css: dict[str, str] = Field(
        default_factory=dict, description="field name -> CSS selector; the matches' text"
    )
    xpath: dict[str, str] = Field(
        default_factory=dict, description="field name -> XPath; the matches' text or values"
    )
    function: str | None = Field(
        None,
        description='"package.module:function" called with each page, returning a mapping '
        "of field names to values",
    )
    function_timeout_s: float = Field(
        1.0, gt=0, description="seconds the function may take per page (past them: an error)"
    )
    max_value_chars: int = Field(
        100_000, ge=1, description="a field's value is cut to this many characters"
    )

    def compiled(self) -> dict[str, etree.XPath]:
        """Each selector field as a compiled XPath; ValueError names the first that does not
        parse."""
        paths: dict[str, etree.XPath] = {}
        for name, selector in self.css.items():
            try:
                paths[name] = etree.XPath(GenericTranslator().css_to_xpath(selector))
            except (SelectorError, etree.XPathError) as exc:
                raise ValueError(f"css {name} = {selector!r}: {exc}") from None
        for name, expression in self.xpath.items():
            try:
                paths[name] = etree.XPath(expression)
            except etree.XPathError as exc:
                raise ValueError(f"xpath {name} = {expression!r}: {exc}") from None
        return paths

    @model_validator(mode="after")
    def _selectors_parse(self) -> ExtractSettings:
        self.compiled()
        return self

    @field_validator("function")
    @classmethod
    def _function_path(cls, value: str | None) -> str | None:
        if value is not None:
            load_function(value)
        return value


def load_function(path: str) -> Callable[..., Any]:
    """The callable `path` ("package.module:function") names; ValueError if there is none."""
    if not _FUNCTION.fullmatch(path):
        raise ValueError(f'{path!r} is not "package.module:function"')
    module_name, _, name = path.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), name)
    except Exception as exc:  # the user's module: whatever its import raises
        raise ValueError(f"cannot load {path}: {type(exc).__name__}: {exc}") from None
    if not callable(function):
        raise ValueError(f"{path} is not callable")
    return function
