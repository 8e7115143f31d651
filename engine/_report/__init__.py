"""Reports for people: Markdown for pull requests, PNG plots.

* ``markdown``: the observational report and the number formatting every report shares;
* ``interventional``: the campaign report;
* ``adaptive``: its section on adaptive ladders and their dose-response curves;
* ``plots``: ratio distributions, the sigma matrix and the graph;
* ``profile``: an observational profile written out (json, report, plots);
* ``html``, ``pages``, ``svg``, ``curve``, ``summary``: ``report.html``, one
  self-contained page per campaign, analysis or gate folder, and the summary rows it
  shares with the Markdown;
* ``markup``: the one way text from data enters a page or a Markdown report (escaped
  HTML and SVG elements, assemblers that refuse unescaped text, Markdown code spans and
  escaped text, names shortened for charts);
* ``findings``, ``findings_more``: what a campaign, a gate, an analysis, a comparison and
  an attribution found, as sentences with their numbers (page, Markdown, console);
* ``examples``, ``examples_html``, ``examples_text``: example pairs one can open
  (``examples.json``, the page, ``quiver show``);
* ``glance``, ``campaign_figures``, ``glossary``, ``layout``, ``graphsvg``: the campaign
  page's table and figures, the terms' definitions, the layered graph layout.
"""

from __future__ import annotations

from .examples import EXAMPLES_FILE, find_pair, list_pairs, pair_view, write_examples
from .findings import campaign_findings, findings_console, findings_markdown
from .findings_more import analysis_findings, attribution_findings, compare_findings, gate_findings, gate_iterations
from .html import HTML_FILE, detect, folder_files, read_json, write_html
from .interventional import campaign_markdown, interventional_report
from .localize import localize_findings, localize_markdown, localize_page
from .markdown import REPORT_FILE, fmt, fmt_ci, fmt_est, graph_nodes, render_report, write_report
from .markup import md_code, md_table, md_text, visible, xml_text
from .plots import CLASS_COLORS, PLOT_FILES, write_plots
from .profile import write_profile

__all__ = [
    "render_report",
    "write_report",
    "REPORT_FILE",
    "fmt",
    "fmt_ci",
    "fmt_est",
    "graph_nodes",
    "interventional_report",
    "campaign_markdown",
    "write_html",
    "detect",
    "read_json",
    "HTML_FILE",
    "write_plots",
    "PLOT_FILES",
    "CLASS_COLORS",
    "write_profile",
    "md_code",
    "md_table",
    "md_text",
    "xml_text",
    "visible",
    "folder_files",
    "EXAMPLES_FILE",
    "write_examples",
    "find_pair",
    "pair_view",
    "localize_findings",
    "localize_markdown",
    "localize_page",
    "list_pairs",
    "campaign_findings",
    "findings_console",
    "findings_markdown",
    "gate_findings",
    "gate_iterations",
    "analysis_findings",
    "compare_findings",
    "attribution_findings",
]
