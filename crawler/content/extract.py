"""The `[extract]` fields of a page: CSS selectors and XPath over its parsed document, and a
user function (`"package.module:function"`) for what selectors cannot say.

A field that fails costs only itself: a bad match, an exception, a function past its time
(`function_timeout_s`) or a value that is not a mapping of names to values gives that page's
field (or, for the function, its one `function` row) an `error` and no value; the node goes
on. A function that loops is interrupted: when its time is up an exception is raised in its
thread (CPython's asynchronous exceptions), which stops Python code at once and a call blocked
in C code as soon as it returns to Python.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lxml import etree
from lxml.html import HtmlElement

from crawler.content.settings import ExtractSettings, load_function

# The row of a function's failure as a whole (it raised, ran out of time, returned junk).
FUNCTION_FIELD = "function"


@dataclass(frozen=True)
class Page:
    """What a user function receives."""

    url: str
    status: int
    headers: Mapping[str, str]  # the response's, names in lower case
    html: str  # the body, decoded
    tree: HtmlElement | None  # the parsed document (lxml), None if it did not parse


@dataclass(frozen=True)
class Field:
    name: str
    value: str | None
    error: str | None = None


class ExtractTimeout(BaseException):
    """Raised in the thread of a user function that ran past its time (not an Exception, so
    that the function's own `except Exception` does not swallow it)."""


class _Deadlines:
    """One thread that raises ExtractTimeout in threads whose deadline passed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, int]] = {}  # key -> (deadline, thread id)
        self._keys = itertools.count()
        self._thread: threading.Thread | None = None

    @contextmanager
    def limit(self, seconds: float) -> Iterator[None]:
        """Run the body with at most `seconds`; past them it gets ExtractTimeout."""
        thread_id = threading.get_ident()
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="extract-deadlines")
                self._thread.daemon = True
                self._thread.start()
            key = next(self._keys)
            self._due[key] = (time.monotonic() + seconds, thread_id)
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                if self._due.pop(key, None) is None:
                    # The deadline fired: an exception may still wait to be raised here,
                    # after the function returned; it must not hit the caller.
                    _set_async_exc(thread_id, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for key, (deadline, thread_id) in list(self._due.items()):
                    if deadline <= now:
                        del self._due[key]
                        _set_async_exc(thread_id, ExtractTimeout)
                soonest = min((due for due, _ in self._due.values()), default=None)
                self._cond.wait(None if soonest is None else max(0.0, soonest - now))


def _set_async_exc(thread_id: int, exception: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exception) if exception else None
    )


_DEADLINES = _Deadlines()


class Extractor:
    """The [extract] fields of pages, compiled once per node."""

    def __init__(self, settings: ExtractSettings) -> None:
        self._settings = settings
        self._paths = settings.compiled()  # they parse: the settings were checked
        self._function = None if settings.function is None else load_function(settings.function)

    @property
    def active(self) -> bool:
        return bool(self._paths) or self._function is not None

    def fields(self, page: Page) -> list[Field]:
        fields = [self._match(name, path, page.tree) for name, path in self._paths.items()]
        if self._function is not None:
            fields += self._call(self._function, page)
        return fields

    def _match(self, name: str, path: etree.XPath, tree: HtmlElement | None) -> Field:
        if tree is None:
            return Field(name, None)
        try:
            found = path(tree)
        except etree.XPathError as exc:
            return Field(name, None, f"{type(exc).__name__}: {exc}")
        matches = found if isinstance(found, list) else [found]
        values = [_text_of(match) for match in matches]
        text = "\n".join(value for value in values if value)
        return self._field(name, text or None)

    def _call(self, function: Callable[[Page], Any], page: Page) -> list[Field]:
        timeout = self._settings.function_timeout_s
        try:
            with _DEADLINES.limit(timeout):
                result = function(page)
        except ExtractTimeout:
            return [Field(FUNCTION_FIELD, None, f"timeout: more than {timeout:g} s")]
        except Exception as exc:  # the user's code: whatever it raises is its page's error
            return [Field(FUNCTION_FIELD, None, f"{type(exc).__name__}: {str(exc)[:200]}")]
        if not isinstance(result, Mapping):
            return [Field(FUNCTION_FIELD, None, f"returned {type(result).__name__}, not a mapping")]
        fields = []
        for key, value in result.items():
            if not isinstance(key, str) or not key:
                fields.append(Field(FUNCTION_FIELD, None, f"a field name {key!r} is not a string"))
                continue
            try:
                text = _value_text(value)
            except Exception as exc:  # a value whose str() or JSON form fails
                fields.append(Field(key, None, f"{type(exc).__name__}: {str(exc)[:200]}"))
                continue
            fields.append(self._field(key, text))
        return fields

    def _field(self, name: str, value: str | None) -> Field:
        limit = self._settings.max_value_chars
        if value is not None and len(value) > limit:
            return Field(name, value[:limit], f"value cut at {limit} characters")
        return Field(name, value)


def _text_of(match: Any) -> str:
    """An element's text, or an attribute's, string's or number's value."""
    if isinstance(match, etree._Element):
        return " ".join("".join(match.itertext()).split())
    if isinstance(match, bool):
        return "true" if match else "false"
    return str(match).strip()


def _value_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    return json.dumps(value, ensure_ascii=False, default=str)
