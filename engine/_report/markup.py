"""Text from data written into HTML, SVG and Markdown, escaped on the one way in.

Node names, template ids, perturbation ids, field names, values and error messages come
from traces, specs and JSON files a report is rebuilt from: any of them may hold ``<``,
quotes, backticks, newlines or five thousand characters. Every writer of ``report.html``
and of the Markdown reports goes through this module, so that none of it can become
markup.

HTML and SVG (in the manner of markupsafe, written here):

* :class:`Markup` is a ``str`` of trusted markup. Joining, adding and formatting a
  ``Markup`` escapes every operand that is not one (``Markup("<td>{}</td>").format(x)``);
* :func:`element` builds an element whose attribute values and text children are escaped
  (a run of text too long for a table cell given places to break, ``<wbr>``);
* :func:`markup_only` is what the page assembler (:func:`quiver._report.html.page`) and the
  chart assembler run over their parts: a plain ``str`` is refused with a TypeError, so a
  writer that forgot to escape fails in the tests instead of injecting;
* :func:`anchor` turns a name into an ``id`` fit for ``url(#...)`` and ``href="#..."``
  (letters, digits and dashes, made unique by a hash), never the raw name;
* :func:`label` shortens a name for a chart (a bounded width, an ellipsis, control and
  bidirectional-override characters made visible).

Markdown: :func:`md_code` writes a value as a code span that cannot be broken out of (a
fence longer than any backtick run inside, line breaks and control characters made
visible), :func:`md_text` as plain text in which every character that Markdown or HTML
would read is escaped (an ordinary name reads as it is), and :func:`md_table` writes a
table whose cells cannot split or end a row.
"""

from __future__ import annotations

import hashlib
import re
import string
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["Markup", "escape", "element", "breakable", "markup_only", "anchor", "label", "visible", "md_code",
           "md_text", "md_table", "xml_text", "RUN"]


class Markup(str):
    """A string of trusted markup: what it holds is written to the page as it is.

    Only string literals of the writers and the results of :func:`escape`,
    :func:`element` and of the operations below are Markup; ``+``, :meth:`join` and
    :meth:`format` escape every operand that is a plain ``str`` (or anything else).
    """

    __slots__ = ()

    def __add__(self, other: str) -> Markup:
        return Markup(str.__add__(self, escape(other)))

    def __radd__(self, other: str) -> Markup:
        return Markup(str.__add__(escape(other), self))

    def join(self, parts: Iterable[object]) -> Markup:
        """The parts joined with this markup, each escaped unless it is Markup."""
        return Markup(str.join(self, (escape(p) for p in parts)))

    def format(self, *args: object, **kwargs: object) -> Markup:
        """This markup with each replacement field filled by its argument, escaped
        unless it is Markup (a format spec applies to the value before escaping)."""
        return Markup(_FORMATTER.vformat(self, args, kwargs))

    def __html__(self) -> Markup:
        return self


class _EscapingFormatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if isinstance(value, Markup) and not format_spec:
            return value
        return escape(format(value, format_spec))


_FORMATTER = _EscapingFormatter()

_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"})
_ATTRIBUTE = str.maketrans({"&": "&amp;", "<": "&lt;", '"': "&quot;", "'": "&#x27;"})


def escape(value: object) -> Markup:
    """``value`` as text in HTML or SVG: ``& < > " '`` escaped (Markup as it is)."""
    if isinstance(value, Markup):
        return value
    return Markup(str(value).translate(_TEXT))


def _attribute_name(name: str) -> str:
    """``stroke_width`` -> ``stroke-width``, ``class_`` -> ``class`` (names are code, not data)."""
    name = name.rstrip("_").replace("_", "-")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9:-]*", name):
        raise ValueError(f"not an attribute name: {name!r}")
    return name


def _attribute(name: str, value: object) -> str:
    if value is None or value is False:
        return ""
    if value is True:
        return f" {_attribute_name(name)}"
    text = str(value).replace('"', "&quot;") if isinstance(value, Markup) else str(value).translate(_ATTRIBUTE)
    return f' {_attribute_name(name)}="{text}"'


def element(tag: str, *children: object, attrs: Mapping[str, object] | None = None, **more: object) -> Markup:
    """``<tag attr="value">children</tag>`` with every attribute value and every child
    that is not Markup escaped; an SVG shape without children is closed as ``<line .../>``
    and an HTML void element (``img``) left open. In the text of a cell, a list item, a
    paragraph, a heading or a code span, a run of more than :data:`RUN` characters with
    no space is given places to break (:func:`breakable`): a name of any length wraps
    in its table cell instead of widening the table.

    Attributes come from ``attrs`` (any name) and the keywords (``_`` written as ``-``, a
    trailing ``_`` dropped: ``class_``, ``stroke_width``); None or False leaves one out,
    True writes it bare.
    """
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", tag):
        raise ValueError(f"not a tag name: {tag!r}")
    head = tag + "".join(_attribute(k, v) for k, v in {**(attrs or {}), **more}.items())
    if tag in _VOID:
        return Markup(f"<{head}>")
    if not children and tag in _SHAPES:
        return Markup(f"<{head}/>")
    text = breakable if tag in _FLOW else escape
    return Markup(f"<{head}>{''.join(text(c) for c in children)}</{tag}>")


_VOID = frozenset({"img", "meta", "br", "hr", "input", "link"})
_SHAPES = frozenset({"line", "rect", "circle", "ellipse", "polygon", "polyline", "path", "use", "stop"})
_FLOW = frozenset({"td", "th", "li", "p", "code", "h1", "h2", "h3", "h4", "h5", "h6", "summary", "figcaption",
                   "strong", "em"})
RUN = 24
"""The longest run of text without a place to break that a page writes."""
_LONG_RUN = re.compile(rf"\S{{{RUN + 1},}}")


def breakable(value: object) -> Markup:
    """``value`` escaped as HTML text, with a ``<wbr>`` (a place to break a line, no
    character) after every :data:`RUN` characters of a run without spaces (Markup as it is)."""
    if isinstance(value, Markup):
        return value
    text = str(value)
    out, pos = [], 0
    for m in _LONG_RUN.finditer(text):
        run = m.group(0)
        out += [escape(text[pos:m.start()]), Markup("<wbr>").join(run[i:i + RUN] for i in range(0, len(run), RUN))]
        pos = m.end()
    return Markup("").join([*out, escape(text[pos:])])


def markup_only(parts: Iterable[object], where: str) -> list[Markup]:
    """``parts`` as a list, each checked to be Markup.

    Raises:
        TypeError: A part is a plain ``str`` (or anything else): text that was never
            escaped, which ``where`` refuses to write.
    """
    out: list[Markup] = []
    for part in parts:
        if not isinstance(part, Markup):
            raise TypeError(f"{where} takes Markup only, got {type(part).__name__} {str(part)[:60]!r}: escape it "
                            "(quiver._report.markup.escape) or build it with element()")
        out.append(part)
    return out


# --------------------------------------------------------------------------- names in charts


def anchor(*parts: object) -> str:
    """An ``id`` for ``parts`` (say a chart's name and ``"hatch"``) fit for ``url(#...)``:
    a short slug of letters, digits and dashes, and a hash of the whole that keeps two
    names apart."""
    whole = "\x1f".join(str(p) for p in parts)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", whole).strip("-")[:32].strip("-")
    digest = hashlib.sha256(whole.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"q-{slug}-{digest}" if slug else f"q-{digest}"


_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _shown(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    if ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp"):
        return _code(ch)
    return ch


def _code(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object) -> str:
    """``text`` with line breaks, control characters, lone surrogates and bidirectional
    controls written as escapes (``\\n``, ``\\x1b``, ``\\u202e``): one line that reads
    in the order it is stored."""
    s = str(text)
    if s.isprintable() and not any(ch in _BIDI for ch in s):
        return s
    return "".join(_shown(ch) for ch in s)


def _width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def label(text: object, limit: int = 40) -> str:
    """``text`` (made :func:`visible`) in at most ``limit`` columns (a wide character
    counts two): cut in the middle with an ellipsis when longer, two thirds of it kept
    from the start and one third from the end."""
    s = visible(text)
    if len(s) <= limit // 2 or sum(_width(ch) for ch in s) <= limit:
        return s
    head = _fit(s, (limit - 1) * 2 // 3)
    tail = _fit(s[::-1], limit - 1 - (limit - 1) * 2 // 3)[::-1]
    return head + "…" + tail


def _fit(s: str, columns: int) -> str:
    """The longest start of ``s`` that fits in ``columns``."""
    used = 0
    for i, ch in enumerate(s):
        used += _width(ch)
        if used > columns:
            return s[:i]
    return s


# --------------------------------------------------------------------------- Markdown


def md_code(value: object) -> str:
    """``value`` as a Markdown code span nothing inside can end: its fence is longer than
    any run of backticks in it, padded with a space where it starts or ends with a
    backtick or a space, its line breaks and control characters made :func:`visible`
    (``|`` is escaped by :func:`md_table` where it sits in a table)."""
    text = visible(value)
    if not text:
        return "` `"
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_MD_ESCAPE = re.compile(r"[\\`*~]|\](?=\()|(?<![^\W_])_|_(?![^\W_])|<(?!\s)|&(?=#?[A-Za-z0-9]+;)")
_MD_BLOCK = re.compile(r"#{1,6}(?=\s|$)|[+-](?=\s|$)|[>|]|[=-]+\s*$|\d{1,9}[.)](?=\s|$)")


def md_text(value: object) -> str:
    """``value`` as plain Markdown text that reads as it is and cannot become markup:
    backslash, backtick, ``*``, ``~``, a ``_`` at the edge of a word and the ``]`` of a
    link backslash-escaped; a ``<`` that could open a tag or an autolink (any but one
    before a space: ``a < b``) and an ``&`` that would start an entity written as entities;
    what would open a block at the start of a line (``#``, ``>``, ``-``, ``1.``,
    a space) escaped; line breaks and control characters made :func:`visible`. An
    ordinary name (letters, digits, ``_ - . / :``) is unchanged."""
    text = _MD_ESCAPE.sub(_md_escaped, visible(value))
    if _MD_BLOCK.match(text):
        return re.sub(r"^(\d*)(.)", r"\1\\\2", text, count=1)
    return "&#32;" + text[1:] if text[:1] == " " else text


def _md_escaped(m: re.Match[str]) -> str:
    ch = m.group(0)
    return {"<": "&lt;", "&": "&amp;"}.get(ch, "\\" + ch)


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]], align: str) -> list[str]:
    """A Markdown table; ``align`` has one letter per column, ``l``, ``r`` or ``c``. Every ``|``
    in a cell is escaped (also inside code spans, as GitHub reads tables) and a line
    break becomes a space, so no cell can split or end its row."""
    rule = [{"r": "---:", "c": ":---:"}.get(a, "---") for a in align]
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def _md_cell(text: object) -> str:
    return re.sub(r"\r\n|[\r\n]", " ", str(text)).replace("|", "\\|")


# --------------------------------------------------------------------------- XML


_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(value: object) -> str:
    """``value`` with the characters XML 1.0 cannot hold at all (most C0 controls, lone
    surrogates) written as escapes; ``& < > "`` are left to the XML writer."""
    return _XML_ILLEGAL.sub(lambda m: _code(m.group(0)), str(value))
