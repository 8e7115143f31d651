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
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from quiver._errors import QuiverError

__all__ = ["HTML_FILE", "detect", "read_json", "write_html", "page", "markdown_html", "cell", "details"]

HTML_FILE = "report.html"

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1180px;padding:18px 28px;
color:#222;line-height:1.45}
h1{font-size:1.55em;margin:.2em 0 .3em}h2{font-size:1.2em;margin:1.4em 0 .5em;border-bottom:1px solid #ddd}
h3{font-size:1.02em;margin:1em 0 .4em}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.86em}
th,td{border:1px solid #d0d0d0;padding:3px 7px;vertical-align:top}th{background:#f2f4f7;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.bad td{background:#fdecea}tr.bad td:first-child{border-left:4px solid #b2182b}
code{background:#f4f4f4;padding:0 3px;border-radius:3px;font-size:.92em}
details{margin:.35em 0;border:1px solid #e0e0e0;border-radius:4px;padding:.3em .7em}
summary{cursor:pointer;font-weight:600}
.plots{display:flex;flex-wrap:wrap;gap:14px 26px;align-items:flex-start}
figure{margin:0}figcaption{font-size:.82em;color:#555;max-width:640px}
svg.plot,img.plot{max-width:100%;height:auto}
.lead{font-size:1.02em}.muted{color:#666;font-size:.88em}
.verdict-pass{color:#1a7f37}.verdict-fail{color:#b2182b}
"""


def page(title: str, body: Iterable[str]) -> str:
    """A whole page: ``title`` in ``<title>`` and ``<h1>``, then ``body``."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>\n"
            f"<h1>{escape(title)}</h1>\n" + "\n".join(body) + "\n</body></html>\n")


def cell(text: object, *, field: str | None = None, value: Any = None, num: bool = False,
         extra: Mapping[str, Any] | None = None, title: str | None = None) -> str:
    """A ``<td>``; ``field`` and ``value`` become ``data-field`` / ``data-value`` (JSON),
    ``extra`` more ``data-`` attributes, ``title`` a tooltip."""
    attrs = ' class="num"' if num else ""
    if title:
        attrs += f' title="{escape(title, quote=True)}"'
    if field is not None:
        attrs += f' data-field="{escape(field)}" data-value="{escape(json.dumps(value), quote=True)}"'
    for k, v in (extra or {}).items():
        attrs += f' data-{escape(k)}="{escape(json.dumps(v), quote=True)}"'
    return f"<td{attrs}>{escape(str(text))}</td>"


def details(title: str, inner: Iterable[str], *, open_: bool = False) -> str:
    return (f"<details{' open' if open_ else ''}><summary>{escape(title)}</summary>\n" + "\n".join(inner)
            + "\n</details>")


def png_img(path: Path, alt: str) -> str | None:
    """An ``<img>`` with the PNG at ``path`` inline (None when there is no such file)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(b"\x89PNG"):
        return None
    return (f'<img class="plot" data-plot="{escape(path.stem)}" alt="{escape(alt, quote=True)}" '
            f'src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">')


# --------------------------------------------------------------------------- Markdown


_INLINE = [
    (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])"), r"<em>\1</em>"),
]


def _inline(text: str) -> str:
    out = escape(text, quote=False)
    for pattern, repl in _INLINE:
        out = pattern.sub(repl, out)
    return out


def _cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|") if line.strip().endswith("|") else line.strip()[1:])
    return [p.strip().replace("\\|", "|") for p in parts]


def _md_table(lines: Sequence[str]) -> str:
    head, rule, rows = _cells(lines[0]), _cells(lines[1]), [_cells(x) for x in lines[2:]]
    right = [r.endswith(":") for r in rule]
    out = ["<table><thead><tr>" + "".join(f"<th>{_inline(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for row in rows:
        tds = [f'<td class="num">{_inline(c)}</td>' if i < len(right) and right[i] else f"<td>{_inline(c)}</td>"
               for i, c in enumerate(row)]
        out.append("<tr>" + "".join(tds) + "</tr>")
    return "".join(out) + "</tbody></table>"


def markdown_html(md: str, *, images: bool = False) -> str:
    """The Markdown the reports write (headings, tables, lists, quotes, paragraphs,
    code spans, bold, italics) as HTML; image links left out unless ``images``."""
    out: list[str] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.strip() == "---":
            i += 1
        elif line.startswith("#"):
            level = min(6, len(line) - len(line.lstrip("#")) + 1)
            out.append(f"<h{level}>{_inline(line.lstrip('#').strip())}</h{level}>")
            i += 1
        elif line.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(_md_table(lines[i:j]) if j - i >= 2 else f"<p>{_inline(line)}</p>")
            i = j
        elif line.startswith("- "):
            j = i
            while j < len(lines) and lines[j].startswith("- "):
                j += 1
            out.append("<ul>" + "".join(f"<li>{_inline(x[2:])}</li>" for x in lines[i:j]) + "</ul>")
            i = j
        elif line.startswith("!["):
            i += 1
            if images:
                out.append(f"<p>{_inline(line)}</p>")
        else:
            j = i
            while j < len(lines) and lines[j].strip() and not lines[j].startswith(("#", "|", "- ", "![")):
                j += 1
            text = " ".join(x.lstrip("> ").strip() for x in lines[i:j])
            out.append(f"<p>{_inline(text)}</p>")
            i = j
    return "\n".join(out)


def md_sections(md: str) -> list[tuple[str, str]]:
    """``(title, markdown)`` for each ``## `` section of ``md`` (the text before the first
    one is left out: the page has its own header)."""
    parts = re.split(r"(?m)^## ", md)
    out = []
    for part in parts[1:]:
        title, _, rest = part.partition("\n")
        out.append((title.strip(), rest))
    return out


def folded(md: str, *, prefix: str = "") -> list[str]:
    """Every ``## `` section of ``md`` folded in a ``<details>``."""
    return [details(prefix + title, [markdown_html(text)]) for title, text in md_sections(md)]


# --------------------------------------------------------------------------- folders


def detect(folder: Path) -> str:
    """``campaign``, ``gate`` or ``analysis``: what ``folder`` holds.

    Raises:
        QuiverError: It holds none of ``campaign.json``, ``gate.json``, ``profile.json``.
    """
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise QuiverError(f"{folder} {what}; give the folder of a `quiver run`, `quiver analyze` or `quiver gate`")
    for name, kind in (("campaign.json", "campaign"), ("gate.json", "gate"), ("profile.json", "analysis")):
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


def write_html(folder: str | Path, kind: str | None = None, *, files: Sequence[tuple[str, int]] | None = None) -> Path:
    """Write ``report.html`` into ``folder`` from the JSON files there.

    Args:
        folder: A campaign, analysis or gate folder.
        kind: What it is (default :func:`detect`).
        files: For a campaign, the files to list with their sizes (default: the folder's
            files as they are now).

    Returns:
        The page's path.

    Raises:
        QuiverError: The folder holds no report JSON, or one that cannot be read.
    """
    out = Path(folder)
    kind = kind or detect(out)
    source = {"campaign": "campaign.json", "gate": "gate.json"}.get(kind, "profile.json")
    try:
        text = _page(out, kind, files)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise QuiverError(f"{out / source}: not as the command that writes it writes it ({type(exc).__name__}: "
                          f"{str(exc)[:200]}); write it again with that command") from None
    path = out / HTML_FILE
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def _page(out: Path, kind: str, files: Sequence[tuple[str, int]] | None) -> str:
    from .pages import analysis_page, campaign_page, gate_page

    if kind == "campaign":
        profile_path = out / "observational" / "profile.json"
        profile = read_json(profile_path) if profile_path.is_file() else None
        text = campaign_page(read_json(out / "campaign.json"), profile, out,
                             files if files is not None else folder_files(out))
    elif kind == "gate":
        md = out / "gate.md"
        text = gate_page(read_json(out / "gate.json"), md.read_text(encoding="utf-8") if md.is_file() else None)
    else:
        text = analysis_page(read_json(out / "profile.json"), out)
    return text


def folder_files(folder: Path) -> list[tuple[str, int]]:
    """The files at the top of ``folder`` (SQLite's side files left out) with their sizes."""
    out = []
    for p in sorted(folder.iterdir()):
        if p.is_file() and not p.name.endswith(("-wal", "-shm", ".tmp")) and p.name != HTML_FILE:
            out.append((p.name, p.stat().st_size))
    return out
