"""A test pipeline with every structural feature the recorder must get right.

* parallel intake on threads: ``classify`` (LLM), ``keywords`` and ``search`` twice,
  submitted to a ``quiver.ThreadPoolExecutor``;
* a node called twice in parallel on asyncio: ``lookup`` gathered;
* a router node (``route``) and a gate decided outside any node (``depth``);
* a loop (``refine``, k_max = 4) of ``draft`` (LLM) and ``check`` (decides ``verdict``).

``JITTER`` adds scheduling noise (tiny sleeps) so that runs interleave differently;
``WORKERS`` sets the intake pool's size. Tests change both between runs.
"""

from __future__ import annotations

import asyncio
import random
import time

import quiver

JITTER = random.Random(0)
WORKERS = 4
K_MAX = 4

CLASSIFY_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "ticket",
        "schema": {
            "type": "object",
            "properties": {
                "urgent": {"type": "boolean"},
                "category": {"type": "string", "enum": ["billing", "bug", "account"]},
            },
            "required": ["urgent", "category"],
        },
    },
}

quiver.template("structured.classify", system="Classify the support ticket.", user="Ticket: {text}")
quiver.template("structured.draft", user="Draft a reply (round {round}) to: {text}\nSources: {sources}")


def _pause() -> None:
    time.sleep(JITTER.random() * 0.002)


@quiver.node("normalize")
def normalize(text: str) -> str:
    _pause()
    return " ".join(text.lower().split())


@quiver.node("classify", kind="llm")
def classify(text: str) -> dict:
    _pause()
    return quiver.llm().chat("structured.classify", text=text, response_format=CLASSIFY_FORMAT, temperature=0).data


@quiver.node("keywords")
def keywords(text: str) -> list[str]:
    _pause()
    return sorted({w for w in text.split() if len(w) >= 4})


@quiver.node("search", kind="retrieval", parents=["normalize"])
def search(text: str, index: str) -> list[dict]:
    _pause()
    docs = [
        {"doc_id": f"{index}-{i}", "content": f"{index} article {i} about {text}", "score": 1.0 / (i + 1)}
        for i in range(2)
    ]
    quiver.retrieved(docs)
    return docs


@quiver.node("lookup", kind="tool", parents=["keywords"])
async def lookup(term: str) -> dict:
    await asyncio.sleep(JITTER.random() * 0.002)
    return {"term": term, "hits": len(term)}


async def lookup_all(terms: list[str]) -> list[dict]:
    return list(await asyncio.gather(*(lookup(t) for t in terms)))


@quiver.node("route", kind="router")
def route(ticket: dict) -> str:
    return quiver.decide("route", "escalate" if ticket["urgent"] else "answer")


@quiver.node("escalate", kind="tool")
def escalate(text: str, ticket: dict) -> dict:
    return {"queue": "urgent", "category": ticket["category"], "summary": text[:40]}


@quiver.node("draft", kind="llm")
def draft(text: str, hits: list[dict], looked: list[dict], round: int) -> str:
    sources = ", ".join(d["doc_id"] for h in hits for d in h)
    return quiver.llm().chat("structured.draft", model="sim-echo", text=text, sources=sources, round=round).content


@quiver.node("check")
def check(answer: str, rounds: int, round: int) -> bool:
    accept = round >= rounds - 1
    quiver.decide("verdict", "accept" if accept else "retry")
    return accept


def pipeline(text: str, rounds: int) -> object:
    norm = normalize(text)
    with quiver.ThreadPoolExecutor(max_workers=WORKERS) as pool:
        f_cls = pool.submit(classify, norm)
        f_kw = pool.submit(keywords, norm)
        f_hits = [pool.submit(search, norm, index) for index in ("faq", "docs")]
    ticket, words = f_cls.result(), f_kw.result()
    hits = [f.result() for f in f_hits]
    looked = asyncio.run(lookup_all(words[:2]))
    arm = route(ticket)
    quiver.decide("depth", "deep" if rounds > 2 else "shallow")
    if arm == "escalate":
        return escalate(norm, ticket)
    answer = None
    for it in quiver.loop("refine", k_max=K_MAX):
        answer = draft(norm, hits, looked, it)
        if check(answer, rounds, it):
            break
    return answer
