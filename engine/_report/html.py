"""``report.html``: one self-contained page per report folder, for people.

The page is a single file: CSS inline, the charts inline SVG (:mod:`.svg`), a PNG (the
observational ratio histograms) inline as base64, no script, nothing fetched. It opens
with the answer (the summary table, the verdict), then the pictures, then the detail
tables folded in ``<details>`` (the Markdown report's sections, rendered).

Three kinds of folder, told apart by the JSON they hold (:func:`detect`):

* a campaign folder (``campaign.json``, with ``observational/profile.json``): written by
  ``quiver run``;
* an analysis folder (``profile.json``): ``quiver analyze``, and a campaign's
  ``observational/``;
* a gate folder (``gate.json``): ``quiver gate``.

:func:`write_html` writes the page of a folder from those files alone, so ``quiver
report DIR`` rebuilds it (and ``report.md``) at any time. The summary table's cells carry
``data-field`` and ``data-value`` attributes (the exact numbers of the JSON) for
programs that read the page.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from quiver._errors import QuiverError
from quiver._outdir import write_text

from .markup import Markup, breakable, element, markup_only

__all__ = ["HTML_FILE", "detect", "read_json", "write_html", "page", "markdown_html", "cell", "details"]

HTML_FILE = "report.html"

_CSS = Markup("""
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1180px;padding:18px 28px;
color:#222;line-height:1.45}
h1{font-size:1.55em;margin:.2em 0 .3em}h2{font-size:1.2em;margin:1.4em 0 .5em;border-bottom:1px solid #ddd}
h3{font-size:1.02em;margin:1em 0 .4em}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.86em}
th,td{border:1px solid #d0d0d0;padding:3px 7px;vertical-align:top}th{background:#f2f4f7;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.bad td{background:#fdecea}tr.bad td:first-child{border-left:4px solid #b2182b}
code{background:#f4f4f4;padding:0 3px;border-radius:3px;font-size:.92em}
td,th,li,p,h2,h3,summary,figcaption,code{overflow-wrap:break-word}
details{margin:.35em 0;border:1px solid #e0e0e0;border-radius:4px;padding:.3em .7em}
summary{cursor:pointer;font-weight:600}
.plots{display:flex;flex-wrap:wrap;gap:14px 26px;align-items:flex-start}
figure{margin:0}figcaption{font-size:.82em;color:#555;max-width:640px}
svg.plot,img.plot{max-width:100%;height:auto}
.lead{font-size:1.02em}.muted{color:#666;font-size:.88em}
.verdict-pass{color:#1a7f37}.verdict-fail{color:#b2182b}
abbr.term{text-decoration:underline dotted #888;text-underline-offset:2px;cursor:help}
.ci{color:#666;font-size:.88em}th.group{text-align:center}
ul#findings{padding-left:1.2em}ul#findings li{margin:.25em 0}li.finding-problem{color:#8a1020}
a.evidence{font-size:.85em;margin-left:.3em}
.pair details{border-color:#eee}table.meta th{width:11em}td.val,span.val{font-family:ui-monospace,monospace;
font-size:.88em;overflow-wrap:anywhere}
table.path tr.differs td{background:#fff8e6}table.path tr.first td{background:#fdecea}
table.path tr.first td:first-child{border-left:4px solid #b2182b}td.absent{color:#999;font-style:italic}
.wdiff{font-family:ui-monospace,monospace;font-size:.86em;line-height:1.6;overflow-wrap:anywhere}
del{background:#fdecea;color:#8a1020}ins{background:#e6f4ea;color:#14532d}
ul.terms{font-size:.88em;color:#444;columns:2;column-gap:2em}ul.terms li{break-inside:avoid;margin:.2em 0}
""")


def page(title: str, body: Iterable[Markup]) -> str:
    """A whole page: ``title`` (text) in ``<title>`` and ``<h1>``, then ``body``.

    Raises:
        TypeError: A part of ``body`` is a plain ``str``, not :class:`Markup`.
    """
    parts = markup_only(body, "page()")
    head = Markup('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
                  '<meta name="viewport" content="width=device-width, initial-scale=1">'
                  "<title>{}</title><style>{}</style></head><body>\n<h1>{}</h1>\n").format(title, _CSS, title)
    return head + Markup("\n").join(parts) + Markup("\n</body></html>\n")


def cell(text: object, *, field: str | None = None, value: Any = None, num: bool = False,
         extra: Mapping[str, Any] | None = None, title: str | None = None) -> Markup:
    """A ``<td>``; ``field`` and ``value`` become ``data-field`` / ``data-value`` (JSON),
    ``extra`` more ``data-`` attributes, ``title`` a tooltip."""
    attrs: dict[str, object] = {"class": "num" if num else None, "title": title or None}
    if field is not None:
        attrs.update({"data-field": field, "data-value": json.dumps(value)})
    for k, v in (extra or {}).items():
        attrs[f"data-{_data_name(k)}"] = json.dumps(v)
    return element("td", text, attrs=attrs)


def _data_name(key: str) -> str:
    """A ``data-`` attribute's name from a key of the code (``by-reason``), never data."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
        raise ValueError(f"not a data attribute name: {key!r}")
    return key


def details(title: str, inner: Iterable[Markup], *, open_: bool = False) -> Markup:
    """A ``<details>`` with ``title`` (text) as its summary.

    Raises:
        TypeError: A part of ``inner`` is a plain ``str``, not :class:`Markup`.
    """
    parts = markup_only(inner, "details()")
    return Markup("<details{}><summary>{}</summary>\n{}\n</details>").format(
        Markup(" open") if open_ else Markup(""), title, Markup("\n").join(parts))


def png_img(path: Path, alt: str) -> Markup | None:
    """An ``<img>`` with the PNG at ``path`` inline (None when there is no such file)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(b"\x89PNG"):
        return None
    return element("img", class_="plot", data_plot=path.stem, alt=alt,
                   src="data:image/png;base64," + base64.b64encode(data).decode("ascii"))


# --------------------------------------------------------------------------- Markdown


_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_STRONG = re.compile(r"\*\*([^*]+)\*\*")
_EM = re.compile(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])")
_HOLD = "\x00"


def _backtick_run(text: str, i: int) -> int:
    j = i
    while j < len(text) and text[j] == "`":
        j += 1
    return j - i


def _closing(text: str, start: int, run: int) -> int:
    """Where the run of exactly ``run`` backticks that closes a code span begins (-1: none)."""
    i = text.find("`", start)
    while i >= 0:
        n = _backtick_run(text, i)
        if n == run:
            return i
        i = text.find("`", i + n)
    return -1


def _code(content: str) -> Markup:
    content = content.replace("\n", " ")
    if len(content) >= 2 and content[0] == content[-1] == " " and content.strip(" "):
        content = content[1:-1]
    return element("code", content)


def _inline(text: str) -> Markup:
    """A line of the reports' Markdown as HTML: code spans (any fence, as CommonMark reads
    them), backslash escapes, entities, bold and italics; everything else escaped."""
    text = text.replace(_HOLD, "\ufffd")
    out: list[Markup] = []
    i = plain = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in _PUNCTUATION:
            i += 2
        elif text[i] == "`":
            run = _backtick_run(text, i)
            end = _closing(text, i + run, run)
            if end < 0:
                i += run
                continue
            out += [_plain(text[plain:i]), _code(text[i + run:end])]
            i = plain = end + run
        else:
            i += 1
    out.append(_plain(text[plain:]))
    return Markup("").join(out)


def _plain(text: str) -> Markup:
    """Text outside code spans: its backslash escapes held apart while bold and italics
    are found, then every character escaped."""
    held: list[str] = []

    def hold(m: re.Match[str]) -> str:
        held.append(m.group(1))
        return f"{_HOLD}{len(held) - 1}{_HOLD}"

    return _emphasis(re.sub(r"\\([!-/:-@\[-`{-~])", hold, text), held)


def _emphasis(text: str, held: list[str]) -> Markup:
    """Bold, then italics inside and around it, then the text."""
    return _spans(text, _STRONG, "strong", lambda bold: _spans(bold, _EM, "em", lambda rest: _text(rest, held)))


def _spans(text: str, pattern: re.Pattern[str], tag: str, inner: Callable[[str], Markup]) -> Markup:
    """Each match of ``pattern`` in ``text`` as a ``tag`` element, ``inner`` around and in them."""
    out: list[Markup] = []
    pos = 0
    for m in pattern.finditer(text):
        out += [inner(text[pos:m.start()]), element(tag, inner(m.group(1)))]
        pos = m.end()
    return Markup("").join([*out, inner(text[pos:])])


def _text(text: str, held: list[str]) -> Markup:
    text = _ENTITY.sub(lambda m: html.unescape(m.group(0)), text)
    return breakable(re.sub(f"{_HOLD}([0-9]+){_HOLD}", lambda m: held[int(m.group(1))], text))


def _cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|") if line.strip().endswith("|") else line.strip()[1:])
    return [p.strip().replace("\\|", "|") for p in parts]


def _md_table(lines: Sequence[str]) -> Markup:
    head, rule, rows = _cells(lines[0]), _cells(lines[1]), [_cells(x) for x in lines[2:]]
    right = [r.endswith(":") for r in rule]
    out = [Markup("<table><thead><tr>"), Markup("").join(element("th", _inline(h)) for h in head),
           Markup("</tr></thead><tbody>")]
    for row in rows:
        tds = [element("td", _inline(c), class_="num" if i < len(right) and right[i] else None)
               for i, c in enumerate(row)]
        out.append(element("tr", Markup("").join(tds)))
    return Markup("").join(out) + Markup("</tbody></table>")


def markdown_html(md: str, *, images: bool = False) -> Markup:
    """The Markdown the reports write (headings, tables, lists, quotes, paragraphs,
    code spans, bold, italics) as HTML, every character of the text escaped; image links
    left out unless ``images``."""
    out: list[Markup] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.strip() == "---":
            i += 1
        elif line.startswith("#"):
            level = min(6, len(line) - len(line.lstrip("#")) + 1)
            out.append(element(f"h{level}", _inline(line.lstrip("#").strip())))
            i += 1
        elif line.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(_md_table(lines[i:j]) if j - i >= 2 else element("p", _inline(line)))
            i = j
        elif line.startswith("- "):
            j = i
            while j < len(lines) and lines[j].startswith("- "):
                j += 1
            out.append(element("ul", Markup("").join(element("li", _inline(x[2:])) for x in lines[i:j])))
            i = j
        elif line.startswith("!["):
            i += 1
            if images:
                out.append(element("p", _inline(line)))
        else:
            j = i
            while j < len(lines) and lines[j].strip() and not lines[j].startswith(("#", "|", "- ", "![")):
                j += 1
            text = " ".join(x.lstrip("> ").strip() for x in lines[i:j])
            out.append(element("p", _inline(text)))
            i = j
    return Markup("\n").join(out)


def md_sections(md: str) -> list[tuple[str, str]]:
    """``(title, markdown)`` for each ``## `` section of ``md`` (the text before the first
    one is left out: the page has its own header)."""
    parts = re.split(r"(?m)^## ", md)
    out = []
    for part in parts[1:]:
        title, _, rest = part.partition("\n")
        out.append((title.strip(), rest))
    return out


def folded(md: str, *, prefix: str = "") -> list[Markup]:
    """Every ``## `` section of ``md`` folded in a ``<details>``."""
    return [details(prefix + title, [markdown_html(text)]) for title, text in md_sections(md)]


# --------------------------------------------------------------------------- folders


def detect(folder: Path) -> str:
    """``campaign``, ``gate``, ``localize`` or ``analysis``: what ``folder`` holds.

    Raises:
        QuiverError: It holds none of ``campaign.json``, ``gate.json``, ``profile.json``.
    """
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise QuiverError(f"{folder} {what}; give the folder of a `quiver run`, `quiver analyze` or `quiver gate`")
    for name, kind in (("campaign.json", "campaign"), ("gate.json", "gate"), ("localize.json", "localize"),
                       ("profile.json", "analysis")):
        if (folder / name).is_file():
            return kind
    raise QuiverError(f"{folder} holds no campaign.json, gate.json or profile.json: give the folder a `quiver run`, "
                      "`quiver analyze` or `quiver gate` wrote")


def read_json(path: Path) -> dict[str, Any]:
    """A report's JSON file, or one error line naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise QuiverError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise QuiverError(f"{path}: not UTF-8 text; write it again with the command that made it") from None
    except ValueError as exc:
        raise QuiverError(f"{path}: not valid JSON ({exc}); write it again with the command that made it") from None
    if not isinstance(data, dict):
        raise QuiverError(f"{path}: holds a JSON {type(data).__name__}, not an object")
    return data


def write_html(folder: str | Path, kind: str | None = None, *,
               files: Sequence[tuple[str, int | None]] | None = None) -> Path:
    """Write ``report.html`` into ``folder`` from the JSON files there.

    Args:
        folder: A campaign, analysis or gate folder.
        kind: What it is (default :func:`detect`).
        files: For a campaign, the files to list with their sizes (None: not known yet;
            default: the folder's files as they are now, and this page).

    Returns:
        The page's path.

    Raises:
        QuiverError: The folder holds no report JSON, or one that cannot be read.
    """
    out = Path(folder)
    kind = kind or detect(out)
    source = {"campaign": "campaign.json", "gate": "gate.json", "localize": "localize.json"}.get(kind, "profile.json")
    try:
        text = _page(out, kind, files)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise QuiverError(f"{out / source}: not as the command that writes it writes it ({type(exc).__name__}: "
                          f"{str(exc)[:200]}); write it again with that command") from None
    path = out / HTML_FILE
    write_text(path, text)
    return path


def _page(out: Path, kind: str, files: Sequence[tuple[str, int | None]] | None) -> str:
    from .pages import analysis_page, campaign_page, gate_page

    if kind == "campaign":
        profile_path = out / "observational" / "profile.json"
        profile = read_json(profile_path) if profile_path.is_file() else None
        listed: list[tuple[str, int | None]] = [*folder_files(out), (HTML_FILE, None)]
        text = campaign_page(read_json(out / "campaign.json"), profile, out, sorted(files or listed))
    elif kind == "localize":
        from .localize import localize_page

        text = localize_page(read_json(out / "localize.json"))
    elif kind == "gate":
        md = out / "gate.md"
        text = gate_page(read_json(out / "gate.json"), md.read_text(encoding="utf-8") if md.is_file() else None)
    else:
        text = analysis_page(read_json(out / "profile.json"), out)
    return text


def folder_files(folder: Path) -> list[tuple[str, int]]:
    """The files at the top of ``folder`` (SQLite's side files and the engine's own
    dot-files, its lock and mark, left out) with their sizes."""
    out = []
    for p in sorted(folder.iterdir()):
        if p.is_file() and not p.name.endswith(("-wal", "-shm", ".tmp")) and p.name != HTML_FILE \
                and not p.name.startswith("."):
            out.append((p.name, p.stat().st_size))
    return out
