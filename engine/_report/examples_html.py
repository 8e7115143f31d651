"""The example pairs (:mod:`.examples`) on ``report.html``: one folded block per
perturbation, one folded pair in it per rule.

A pair shows its input, the target's fields before and after, the two runs' calls side
by side with the first divergent call marked (a red left border and the words "first
divergent call"), each node's distance, and the final output as a word-level diff
(``<del>`` and ``<ins>``). Every value passes through :mod:`.markup`.
"""

from __future__ import annotations

from collections.abc import Sequence

from quiver._stats import fmt

from .examples import ExamplePair
from .findings import perturbation_anchor
from .glossary import term
from .html import details
from .markup import Markup, anchor, element

__all__ = ["examples_section", "pair_html"]


def _kv(name: str, value: Markup | str) -> Markup:
    return element("tr", element("th", name), element("td", value))


def _side(call: str, decided: str | None) -> Markup:
    """A call in one run (its decisions beside it), or that it did not run there."""
    if decided is None:
        return element("td", "did not run", class_="absent")
    return element("td", element("code", call), " ", element("span", decided, class_="ci"))


def _steps(pair: ExamplePair) -> Markup:
    rows = []
    for s in pair.steps:
        said = " and ".join(w for w, on in (("first divergent call", s.first), ("the target (perturbed)", s.target))
                            if on)
        mark = element("td", element("strong", f"◀ {said}") if s.first else said or ("differs" if s.differs else ""),
                       class_="mark")
        rows.append(element("tr", _side(s.call, s.baseline), _side(s.call, s.replay), mark,
                            class_="first" if s.first else ("differs" if s.differs else None),
                            data_call=s.call, data_first=str(s.first).lower()))
    head = element("thead", element("tr", element("th", "baseline (recorded)"), element("th", "replay (perturbed)"),
                                    element("th", "")))
    return element("table", head, element("tbody", Markup("").join(rows)), class_="path")


def _changed(pair: ExamplePair) -> Markup:
    if not pair.changed:
        return element("p", "The target's output is unchanged.", class_="muted")
    rows = Markup("").join(element("tr", element("td", element("code", f)), element("td", a, class_="val"),
                                   element("td", b, class_="val")) for f, a, b in pair.changed)
    head = element("thead", element("tr", element("th", "field"), element("th", "before"), element("th", "after")))
    return element("table", head, element("tbody", rows), class_="changed")


def _distances(pair: ExamplePair) -> Markup:
    cells = Markup("").join(element("tr", element("td", element("code", n)), element("td", fmt(d), class_="num"))
                            for n, d in pair.distances)
    head = element("thead", element("tr", element("th", "node"), element("th", Markup("distance ({})").format(
        term("d_i", "0 same, 1 entirely different")))))
    return element("table", head, element("tbody", cells), class_="distances")


def _output(pair: ExamplePair) -> Markup:
    if not pair.output_diff:
        return Markup("")
    parts = [element("del", w) if op == "-" else element("ins", w) if op == "+" else element("span", w)
             for op, w in pair.output_diff]
    head = "Final output: identical" if not pair.output_changed else \
        "Final output, word by word (struck out: baseline only; underlined: replay only)"
    return element("div", element("p", element("strong", head)), element("p", Markup(" ").join(parts),
                                                                          class_="wdiff"))


def pair_html(pair: ExamplePair) -> Markup:
    """One pair, folded: its summary says the rule and what happened."""
    meta = [_kv("pair id", element("code", pair.pair_id)), _kv("input", Markup("{} {}").format(
        element("code", pair.input_id), element("span", pair.inputs, class_="val"))),
            _kv("stratum", f"{pair.stratum or '—'} ({pair.status})"),
            _kv("size of the change", Markup("{} = {}").format(term("d_i"), fmt(pair.magnitude))),
            _kv("traces", Markup("{} → {}").format(element("code", pair.baseline_trace),
                                                   element("code", pair.replay_trace or "— (the replay failed)")))]
    if pair.error:
        meta.append(_kv("error", pair.error))
    if pair.note:
        meta.append(_kv("not applied", pair.note))
    if pair.cause:
        meta.append(_kv("first divergence", pair.cause))
    inner = [element("table", Markup("").join(meta), class_="meta"),
             element("p", Markup("Target {}:").format(element("code", pair.target))), _changed(pair)]
    if pair.steps:
        inner += [element("p", Markup("The path, call by call ({} marked):").format(term("first divergent call"))),
                  _steps(pair)]
    if pair.distances:
        inner.append(_distances(pair))
    inner.append(_output(pair))
    summary = f"{pair.rule}: {pair.input_id} — {pair.headline()}"
    box = details(summary, inner)
    return element("div", box, class_="pair", id=anchor("pair", pair.pair_id), data_pair=pair.pair_id,
                   data_rule=pair.rule, data_first=pair.first or "")


def examples_section(pairs: Sequence[ExamplePair] | None, order: Sequence[str]) -> list[Markup]:
    """``<h2>Example pairs</h2>`` and, per perturbation (in ``order``), its pairs."""
    head = [Markup("<h2>Example pairs</h2>"),
            element("p", "For each perturbation a few real pairs, chosen by rule: a typical effective one, the one "
                         "whose change travelled furthest (largest cascade), a no-op, and one not applied or failed "
                         "when there is one. ", element("code", "quiver show RUN_DIR PAIR_ID"),
                    " prints any pair on the console; ", element("code", "quiver show RUN_DIR --list"), " lists them.",
                    class_="muted")]
    if not pairs:
        return [*head, element("p", "No example pairs: this folder has no examples.json (a campaign writes it "
                                    "when it finishes).", class_="muted")]
    blocks = []
    for pid in order:
        mine = [p for p in pairs if p.perturbation == pid]
        if mine:
            blocks.append(element("div", details(f"{pid}: {len(mine)} example pair(s)", [pair_html(p) for p in mine]),
                                  class_="examples", id=anchor("examples", pid),
                                  data_examples=pid, data_row=perturbation_anchor(pid)))
    return [*head, *blocks]
