"""Synthetic trace corpora for the analysis benchmark.

* :func:`short_corpus`: the System-Q-shaped corpus (six nodes with structured fields,
  short uniform texts of 1-20 words), in input groups of skewed sizes with about a given
  number of same-input pairs.
* :func:`long_corpus`: agent conversations with real-trace text lengths: every free text
  (a planner's thought, a tool's JSON response, an agent turn, the answer) draws its
  length from a log-normal of median 150 characters and p90 about 600, with a tail past
  2,000; tool responses are JSON documents (records, ids, numbers), and a share of the
  long ones differ between repeats only in their trailing metadata (a request id and a
  latency), as API responses do.
"""

from __future__ import annotations

import json
import math
import random

from quiver import NodeCall, Trace

WORDS = (
    "invoice refund account password export server latency outage billing plan upgrade "
    "discount login token cluster region backup restore webhook quota limit sync mobile "
    "desktop browser email address payment card charge renewal trial seat admin role"
).split()
INTENTS = ["billing", "bug", "account", "other"]
VOCABULARY = (
    "the a customer order shipment warehouse delayed because carrier reported weather exception "
    "we checked inventory system shows two units reserved for this account policy allows refund "
    "within thirty days of delivery agent should confirm address before issuing label tracking "
    "number was generated yesterday but scan event missing from hub; escalate to logistics team "
    "if no update after forty eight hours. user asked about invoice total tax included discount "
    "code applied at checkout price matched competitor listing subscription renews monthly plan "
    "premium tier includes priority support and extended warranty coverage for devices"
).split()
TOOLS = ["order_lookup", "shipment_status", "refund_policy", "inventory_check", "account_profile"]

LENGTH_MEDIAN = 130.0
LENGTH_SIGMA = 1.08
"""ln(600 / 150) / 1.2816: p90 at about 4 x the median. The median is set a little under
150 so that the texts that need a vector (the tool responses carry JSON around their
records) have a median of about 150 characters and a p90 of about 600."""


def group_sizes(traces: int, groups: int, pairs: int, seed: int) -> list[int]:
    """Skewed group sizes (Zipf-like) summing to ``traces`` with about ``pairs`` pairs."""
    rng = random.Random(seed)
    ranks = list(range(1, groups + 1))
    rng.shuffle(ranks)

    def sizes_for(exponent: float) -> list[int]:
        weights = [1.0 / r**exponent for r in ranks]
        total = sum(weights)
        sizes = [max(2, round(traces * w / total)) for w in weights]
        sizes[sizes.index(max(sizes))] += traces - sum(sizes)
        return sizes

    low, high = 0.0, 3.0
    for _ in range(40):  # bisection on the exponent: more skew, more pairs
        mid = (low + high) / 2
        if sum(n * (n - 1) // 2 for n in sizes_for(mid)) < pairs:
            low = mid
        else:
            high = mid
    return sizes_for((low + high) / 2)


# --------------------------------------------------------------------------- short


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _short_trace(input_id: str, repeat: int, query: str, rng: random.Random, noisy: bool) -> Trace:
    """One trace of a six-node pipeline: rewrite, signal, retrieve, plan, compose, audit.

    A deterministic input (``noisy`` false) gives the same outputs on every repeat, as a
    temperature-0 pipeline does: its texts never need a vector.
    """
    rng = rng if noisy else random.Random(query)
    rewrite = query if not noisy or rng.random() < 0.2 else f"{query} {sentence(rng, 4)}"
    signal = {"intent": rng.choice(INTENTS) if noisy and rng.random() < 0.3 else INTENTS[len(query) % 4],
              "urgent": bool(noisy and rng.random() < 0.2), "confidence": round(rng.uniform(0.5, 1.0), 2)}
    docs = sorted(rng.sample(range(40), 4)) if noisy else [1, 2, 3, 4]
    plan = {"action": rng.choice(["EXECUTE", "COMPOSE"]) if noisy else "COMPOSE", "thought": sentence(rng, 10)}
    compose = {"answer": sentence(rng, 18), "refs": [f"d{d}" for d in docs[:2]]}
    audit = {"summary": sentence(rng, 8), "tokens": rng.randint(50, 400)}
    outputs = [("rewrite", rewrite), ("signal", signal), ("retrieve", docs), ("plan", plan),
               ("compose", compose), ("audit", audit)]
    parents = {"rewrite": ["c0"], "signal": ["c1"], "retrieve": ["c1"], "plan": ["c2", "c3"],
               "compose": ["c4"], "audit": ["c5"]}
    calls = [NodeCall(call_id="c0", node="input", occurrence=0, call_path="input#0", kind="source",
                      output={"query": query})]
    for i, (node, out) in enumerate(outputs, start=1):
        calls.append(NodeCall(call_id=f"c{i}", node=node, occurrence=0, call_path=f"{node}#0",
                              kind="transform", parents=parents[node], output=out,
                              decision={"action": out["action"]} if node == "plan" else {}))
    return Trace(trace_id=f"{input_id}/{repeat}", run_id="bench", pipeline="system_q", input_id=input_id,
                 repeat=repeat, inputs={"query": query}, calls=calls, output=compose["answer"])


def short_corpus(traces: int, groups: int, pairs: int, seed: int) -> list[Trace]:
    """The System-Q-shaped corpus; an eighth of the inputs are fully deterministic."""
    rng = random.Random(seed)
    out = []
    for g, size in enumerate(group_sizes(traces, groups, pairs, seed)):
        query = sentence(rng, 9)
        noisy = g % 8 != 0
        out += [_short_trace(f"q{g}", r, query, rng, noisy) for r in range(size)]
    return out


# --------------------------------------------------------------------------- long


def text_length(rng: random.Random) -> int:
    """A free text's length in characters: log-normal, median 150, p90 about 600."""
    return max(12, min(6000, round(LENGTH_MEDIAN * math.exp(rng.gauss(0.0, LENGTH_SIGMA)))))


def prose(rng: random.Random, length: int) -> str:
    """Words until ``length`` characters, in sentences."""
    parts: list[str] = []
    size = 0
    while size < length:
        n = rng.randint(6, 16)
        s = " ".join(rng.choice(VOCABULARY) for _ in range(n)).capitalize() + "."
        parts.append(s)
        size += len(s) + 1
    return " ".join(parts)[:length]


def tool_json(rng: random.Random, tool: str, args: dict[str, object], length: int, tail: str) -> str:
    """A tool's JSON response of about ``length`` characters: records, then ``tail``
    (trailing metadata); the records depend on the arguments and ``rng``."""
    records = []
    size = 0
    while size < length:
        record = {"id": f"{tool[:3]}-{rng.randint(10000, 99999)}", "status": rng.choice(["open", "shipped", "held"]),
                  "amount": round(rng.uniform(5, 900), 2), "note": prose(rng, rng.randint(20, 90)),
                  "updated": f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z"}
        records.append(record)
        size += len(json.dumps(record)) + 2
    return json.dumps({"tool": tool, "args": args, "results": records, "meta": tail})


def _long_trace(input_id: str, repeat: int, query: str, seed: int, rng: random.Random) -> Trace:
    """One agent conversation: plan, call a tool, read its response, two agent turns, answer.

    Per repeat the LLM texts are new draws; the tool is the same for a given input, its
    arguments change in a third of the repeats; a stable tool response (the same
    arguments) is identical except, in half of the inputs, for its trailing metadata.
    """
    fixed = random.Random(seed)  # the input's own stable choices
    tool = fixed.choice(TOOLS)
    stable_length = text_length(fixed)
    varies_meta = fixed.random() < 0.5
    args: dict[str, object] = {"order": f"A{fixed.randint(1000, 9999)}", "detail": "full"}
    if rng.random() < 1 / 3:
        args = {**args, "detail": rng.choice(["summary", "items", "history"])}
    tail = {"request_id": f"req-{rng.getrandbits(40):010x}", "latency_ms": rng.randint(40, 900)} if varies_meta else {}
    response_rng = random.Random(json.dumps([seed, args], sort_keys=True))
    response = tool_json(response_rng, tool, args, stable_length, json.dumps(tail))
    outputs: list[tuple[str, object, list[str]]] = [
        ("planner", {"thought": prose(rng, text_length(rng)), "tool": tool}, ["c0"]),
        ("tool_call", {"tool": tool, "args": args}, ["c1"]),
        ("tool", response, ["c2"]),
        ("agent_turn", prose(rng, text_length(rng)), ["c0", "c3"]),
        ("reflect", {"critique": prose(rng, text_length(rng)), "revise": rng.random() < 0.2}, ["c4"]),
        ("answer", prose(rng, text_length(rng)), ["c4", "c5"]),
    ]
    calls = [NodeCall(call_id="c0", node="input", occurrence=0, call_path="input#0", kind="source",
                      output={"query": query})]
    for i, (node, out, parents) in enumerate(outputs, start=1):
        kind = "tool" if node == "tool" else "llm"
        calls.append(NodeCall(call_id=f"c{i}", node=node, occurrence=0, call_path=f"{node}#0", kind=kind,
                              parents=parents, output=out))
    return Trace(trace_id=f"{input_id}/{repeat}", run_id="bench", pipeline="agent", input_id=input_id,
                 repeat=repeat, inputs={"query": query}, calls=calls, output=outputs[-1][1])


def long_corpus(conversations: int, traces: int, seed: int) -> list[Trace]:
    """``traces`` agent conversations over ``conversations`` inputs of skewed repeat counts."""
    rng = random.Random(seed)
    sizes = group_sizes(traces, conversations, int(traces * 2.5), seed)
    out = []
    for g, size in enumerate(sizes):
        query = prose(rng, rng.randint(40, 160))
        out += [_long_trace(f"c{g}", r, query, seed * 100_003 + g, rng) for r in range(size)]
    return out


def strings(value: object) -> list[str]:
    """Every string inside a JSON-like value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []
