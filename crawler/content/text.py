"""A page's main text (boilerplate removed), its language and its 64-bit simhash.

The main text comes from resiliparse's `extract_plain_text` with its main-content heuristics
(lexbor's HTML parser, in C); the language from resiliparse's `detect_fast`. The comparison with
trafilatura that chose it is in bench/results/text_extraction/NOTES.md.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree
from resiliparse.parse.lang import detect_fast

# Ranks above this are "usually false results" (resiliparse's documentation).
_LANGUAGE_RANK_CUTOFF = 1200
# Shorter texts say too little of their language to name one.
_MIN_LANGUAGE_CHARS = 20
# The language is told from the text's first this many characters: detect_fast's time grows with
# the text, its answer does not improve past a few thousand characters (on 348 long pages of the
# Rust documentation, 72 KB of main text each: 333 named English from this prefix, 326 from the
# whole text; bench/results/cpu_per_page/NOTES.md).
_LANGUAGE_SAMPLE_CHARS = 4000
# Features of the simhash: runs of this many words, so that one changed sentence changes only
# the features it touches.
SHINGLE_WORDS = 3


@dataclass(frozen=True)
class MainText:
    text: str
    languages: str | None  # ISO 639-1, as resiliparse names them
    simhash: int | None  # 64 bits as a signed integer (Parquet int64); None for no words


def main_text(html: str) -> MainText:
    """The main text of a decoded HTML page, its language and its simhash."""
    tree = HTMLTree.parse(html)
    text = extract_plain_text(tree, main_content=True, alt_texts=False)
    if not text.strip():
        # A page that is all "boilerplate" to the heuristics (a hub, a short list): its
        # visible text, rather than nothing.
        text = extract_plain_text(tree, alt_texts=False)
    return MainText(text, language(text), simhash(text))


def language(text: str) -> str | None:
    if len(text) < _MIN_LANGUAGE_CHARS:
        return None
    code, rank = detect_fast(text[:_LANGUAGE_SAMPLE_CHARS])
    return None if code == "unknown" or rank > _LANGUAGE_RANK_CUTOFF else code


# Words hashed so far: a site's pages share most of their words. A dict whose misses hash the
# word (`__missing__`) is read through `map` at C speed, with no pass to find the new words
# first; a new one replaces it once it has grown past its bound (a thread still reading the old
# one finishes with that one). Keyed by the words as the text spells them, each lowered when
# first hashed: that costs less than lowering the whole text of every page.
_WORD_HASHES_MAX = 1 << 16


class _WordHashes(dict[str, int]):
    def __missing__(self, word: str) -> int:
        value = self[word] = _word_hash(word.lower())
        return value


_word_hashes = _WordHashes()
# Each byte value's 8 bits, most significant first (np.unpackbits' order).
_BITS_OF_BYTE = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.int64)


def _word_hash(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")


def _hashes(words: list[str]) -> np.ndarray:
    """Each word's 64-bit hash (of the word in lower case), in order."""
    global _word_hashes
    known = _word_hashes
    if len(known) > _WORD_HASHES_MAX:
        known = _word_hashes = _WordHashes()
    return np.fromiter(map(known.__getitem__, words), dtype=np.uint64, count=len(words))


# Odd multipliers that place the words of a shingle differently, and splitmix64's finalizer
# constants, which spread every input bit over the output.
_POSITION = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xC2B2AE3D27D4EB4F),
    np.uint64(0x165667B19E3779F9),
)
_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
# A shingle's little-endian byte j is its big-endian byte 7 - j: counted under key
# value + 256 * (7 - j), one bincount holds the 8 bytes' histograms, big-endian byte first.
_BYTE_KEYS = np.arange(7, -1, -1, dtype=np.intp) * 256


def simhash(text: str) -> int | None:
    """Charikar's simhash of the word shingles of `text` (lower case, split at white space):
    texts that share most shingles differ in few bits. Each word is hashed once (64-bit
    BLAKE2b), a shingle's hash combines its words' (in numpy), so a long page costs little.
    None for a text of no words."""
    # Split first, then lower each word (`_hashes`): the same words as splitting the lowered
    # text, as no character lowers to white space or from it. Punctuation stays on its word: no
    # regex pass over the text.
    words = text.split()
    if not words:
        return None
    # Few numpy calls: each on a page's thousands of words releases the GIL, on a busy node
    # a handover to another thread and a wait to get it back (bench/results/cpu_per_page/
    # NOTES.md, session 17).
    hashes = _hashes(words)
    size = min(SHINGLE_WORDS, len(words))
    count = len(words) - size + 1
    shingles = hashes[:count] * _POSITION[0]
    for position in range(1, size):
        shingles ^= hashes[position : position + count] * _POSITION[position]
    shingles ^= shingles >> np.uint64(30)
    shingles *= _MIX[0]
    shingles ^= shingles >> np.uint64(27)
    shingles *= _MIX[1]
    shingles ^= shingles >> np.uint64(31)
    # Distinct shingles: sorted, then each unlike its predecessor (np.unique's general path
    # costs four times as much here).
    shingles.sort()
    shingles = shingles[np.concatenate(([True], shingles[1:] != shingles[:-1]))]
    # How many shingles set each of the 64 bits (most significant first), a byte at a time:
    # how often each value occurs in that byte, times the bits of each value.
    octets = shingles.astype("<u8", copy=False).view(np.uint8).reshape(len(shingles), 8)
    counts = np.bincount((octets + _BYTE_KEYS).ravel(), minlength=8 * 256)
    ones = (counts.reshape(8, 256) @ _BITS_OF_BYTE).ravel()
    majority = ones * 2 > len(shingles)
    value = int.from_bytes(np.packbits(majority).tobytes(), "big")
    return value - (1 << 64) if value >= 1 << 63 else value
