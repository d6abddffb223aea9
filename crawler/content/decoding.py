"""HTML bodies decoded as browsers decode them (w3lib's `html_to_unicode`): a byte order mark
first, then the Content-Type header's charset, then a `<meta>` charset or http-equiv in the
first kilobytes, then detection (resiliparse's detector, after a strict UTF-8 try), with
windows-1252 standing for Latin-1 and ASCII as the Encoding Standard says. Bad bytes are
replaced, never fatal."""

from __future__ import annotations

import codecs
from dataclasses import dataclass

import webencodings
from resiliparse.parse.encoding import detect_encoding
from w3lib.encoding import html_to_unicode

# Python's names for encodings the Encoding Standard spells otherwise.
_PYTHON_TO_WHATWG = {"cp932": "shift_jis", "utf-16-le": "utf-16le", "utf-16-be": "utf-16be"}


@dataclass(frozen=True)
class Decoded:
    text: str
    charset: str  # the Encoding Standard's name of what decoded it: "utf-8", "windows-1252"


def whatwg_name(codec: str) -> str:
    """The Encoding Standard's name of a Python codec name (`cp1252` -> `windows-1252`)."""
    try:
        name = codecs.lookup(codec).name
    except LookupError:
        return codec
    name = _PYTHON_TO_WHATWG.get(name, name)
    for label in (name, name.replace("_", "-")):
        encoding = webencodings.lookup(label)
        if encoding is not None:
            return str(encoding.name)
    return name


def _detect(body: bytes) -> str:
    """The encoding of a body that declares none: UTF-8 if it decodes as UTF-8 (what every
    detector concludes, for less), else what the detector says."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return detect_encoding(body) or "windows-1252"
    return "utf-8"


def decode_html(body: bytes, declared: str | None) -> Decoded:
    """`body` decoded as a browser would. `declared`: the Content-Type header's charset as a
    Python codec name, None when it names none that browsers know (`x-nope`, `utf-7`,
    `hex`): such a label is ignored, and the `<meta>` prescan and detection decide."""
    header = None if declared is None else f"text/html; charset={declared}"
    codec, text = html_to_unicode(header, body, auto_detect_fun=_detect)
    return Decoded(text, whatwg_name(codec))
