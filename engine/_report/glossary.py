"""One line for every technical term a report uses, where it is used.

A page writes a term through :func:`term`: an ``<abbr>`` whose ``title`` (the tooltip a
pointer shows) is the term's definition, with a dotted underline that says there is
one. Every term :func:`term` wrote is also listed, with its definition, in the page's
"Terms used on this page" footnote (:func:`glossary`), for a reader on a touch screen
or on paper. The definitions follow QUIVER.md (the paper's notation).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .markup import Markup, element

__all__ = ["TERMS", "term", "glossary", "define", "with_glossary"]

TERMS: dict[str, str] = {
    "D_shape": "The pair took another path: some branch decision differs between baseline and replay.",
    "D_iter": "The loops ran another number of times: the calls per node differ between the two runs.",
    "D_output": "Value divergence: some node's output differs between the two runs (its distance exceeds epsilon; "
                "a perturbed target's own change counts).",
    "D_struct": "Another set of nodes ran: a node ran in one of the two runs only.",
    "D_output-only": "Some node's output differs while the path and the loop counts are the same.",
    "path": "The branch decisions a run took (D_shape compares them).",
    "excess": "The rate among perturbed pairs minus the same rate among control replays: the change the "
              "perturbation caused beyond the pipeline's own noise.",
    "control replays": "Replays of the same traces with the target as recorded (or re-run unchanged) and the rest "
                       "live: the noise a perturbation is held against.",
    "effective": "Pairs where the perturbation changed the target's output.",
    "no-op": "Pairs where the perturbation left the target's output as it was (it already had that value).",
    "not applied": "Replays where the perturbation did not reach what it changes (a field the output lacks, a "
                   "prompt the call did not render): counted in no stratum.",
    "stratum": "The pairs of a perturbation split by what it did to its target: effective, no-op, not applied.",
    "d_i": "The perturbation's size: the distance between the target's output in the baseline and in the replay "
           "(0 = identical, 1 = entirely different).",
    "beta_shape": "The bifurcation threshold: the smallest change of the target (d_i) from which the path changes "
                  "clearly more often than under control.",
    "beta_iter": "The threshold as beta_shape, for a change of the loop counts (D_iter).",
    "≤": "An upper bound: too few pairs probed below it to place the threshold lower.",
    "95% CI": "The 95% confidence interval: the range the estimate lies in, from bootstrap resamples of inputs.",
    "MOVER": "How the excess's interval is formed from the two rates' intervals (Zou and Donner, 2008).",
    "negative control": "Whether the no-op pairs stay at the noise of same-input reruns (a permutation test per "
                        "node); a failure means the replay itself moves things.",
    "sigma": "Edge sensitivity: the mean of d_j / d_i, how much a change at a node grows (> 1) or shrinks (< 1) at "
             "the next one.",
    "sigma obs": "sigma estimated from natural same-input reruns (observational).",
    "sigma int": "sigma estimated from perturbed replays (interventional).",
    "envelope": "The range of d_i that natural reruns reach: outside it, observational data cannot speak.",
    "amplifier": "An edge whose sigma is above 1: a change grows on the way to the next node.",
    "bifurcation source": "A node whose own variation makes the path change (where divergence starts).",
    "noise floor": "A node's mean distance between same-input reruns: what it varies with nothing changed.",
    "first divergent call": "The first call, in program order, whose output, decisions or error differ between "
                            "the two runs.",
    "dose-response": "The event rate plotted against the size of the change.",
    "cascade": "How far a change travels: the mean distance of each downstream node.",
    "quantile bin": "A group of pairs of similar size of change (d_i), cut at quantiles.",
    "ladder step": "One strength of a perturbation tried at several strengths.",
    "drift budget": "The largest change at a node that keeps the change at a downstream node below alpha.",
    "impact set": "The downstream nodes a change at a node can move beyond alpha: those to re-evaluate.",
    "verdict": "PASS: the candidate stays within the measured noise and thresholds; FAIL: it crosses one.",
}
"""Term -> its definition in one line."""


def define(name: str) -> str:
    """The definition of ``name`` (a key of :data:`TERMS`).

    Raises:
        KeyError: ``name`` is not a term.
    """
    return TERMS[name]


def term(name: str, text: str | None = None, *, used: set[str] | None = None) -> Markup:
    """``text`` (default ``name``) marked as the term ``name``: its definition in the
    tooltip; recorded in ``used`` for :func:`glossary`."""
    if used is not None:
        used.add(name)
    return element("abbr", text if text is not None else name, class_="term", title=TERMS[name], data_term=name)


def glossary(names: Iterable[str]) -> Markup:
    """The footnote that defines every term of ``names``, in :data:`TERMS` order."""
    wanted = set(names)
    items = Markup("").join(element("li", element("strong", n), ": ", d) for n, d in TERMS.items() if n in wanted)
    return element("section", element("h2", "Terms used on this page"), element("ul", items, class_="terms"),
                   id="terms")


def with_glossary(body: Sequence[Markup]) -> list[Markup]:
    """``body`` and, at its end, the footnote defining every term it marks or names."""
    import html
    import re

    text = html.unescape(re.sub(r"<[^>]*>", " ", "".join(body)))
    marked = set(re.findall(r'data-term="([^"]*)"', "".join(body)))
    named = {n for n in TERMS if n in marked or re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)}
    return [*body, glossary(html.unescape(n) for n in named)] if named else list(body)
