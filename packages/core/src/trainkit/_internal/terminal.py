"""Data never drives the terminal: a string trainkit shows that came from a run (metric names and
values, error messages, names and paths read back from storage) is printed with every character
that a terminal would act on instead of show written as an escape (``\\x1b``, ``\\u202e``).

Escaped: C0 controls (newline and tab too, unless kept), DEL, C1 controls (U+0080-U+009F), format
characters (Unicode category Cf: the bidi overrides and isolates U+202A-U+202E and U+2066-U+2069,
U+200E/U+200F, U+061C, zero-width characters), line and paragraph separators and lone surrogates
(which would fail the encoding to UTF-8). Printed through rich, the result must still go as a
``Text`` or with ``markup=False``: ``[/x]`` in data is text, not markup.

A rank's printed output is the user's program's own output (``worker_output``): its colour
sequences (SGR, ``ESC [ ... m``), tabs and the bidi marks of real text pass, every other control
character and the bidi overrides and isolates are escaped, and a line that set a colour ends with
a reset.
"""

from __future__ import annotations

import re
import unicodedata

_PLAIN = re.compile(r"[\x20-\x7e]*")  # printable ASCII: nothing to escape (the common case)
_PLAIN_OUTPUT = re.compile(r"[\x20-\x7e\t\n]*")
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# what reorders the text around it: overrides, embeddings, isolates (Trojan Source, CVE-2021-42574)
_BIDI_CONTROLS = frozenset(chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
_RESET = "\x1b[0m"


_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def terminal_safe(text: object, keep_newlines: bool = False) -> str:
    """``text`` (``str()`` of it if it is no string) with every character a terminal would act on
    shown escaped: ``"\\x1b]0;t\\x07loss\\u202e"`` -> ``'\\\\x1b]0;t\\\\x07loss\\\\u202e'``.
    ``keep_newlines``: newlines and tabs stay (a multi-line message, a traceback)."""
    if not isinstance(text, str):
        try:
            text = str(text)
        except Exception as exc:  # a str() that raises: data still never fails what shows it
            text = f"<unprintable {type(text).__name__}: {type(exc).__name__}>"
    if _PLAIN.fullmatch(text):
        return text
    kept = "\n\t" if keep_newlines else ""
    return "".join(_escape(ch) if ch not in kept and unicodedata.category(ch) in _UNSAFE_CATEGORIES else ch
                   for ch in text)


def output_safe(text: str) -> str:
    """A line (or lines) a rank printed: colours, tabs, newlines and the text's own bidi marks kept,
    every other control character and the bidi overrides and isolates escaped."""
    if _PLAIN_OUTPUT.fullmatch(text):
        return text
    coloured = False
    parts: list[str] = []
    last = 0
    for match in _SGR.finditer(text):
        parts.append(_escape_output(text[last:match.start()]))
        parts.append(match.group())
        coloured = True
        last = match.end()
    parts.append(_escape_output(text[last:]))
    shown = "".join(parts)
    if coloured:  # the colour ends with the rank's output, never bleeds into trainkit's lines
        shown = "\n".join(line + _RESET if _SGR.search(line) else line for line in shown.split("\n"))
    return shown


def _escape_output(text: str) -> str:
    return "".join(_escape(ch) if ch not in "\n\t" and (ch in _BIDI_CONTROLS or unicodedata.category(ch) in
                                                       ("Cc", "Cs", "Zl", "Zp")) else ch
                   for ch in text)
