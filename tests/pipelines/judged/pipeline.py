"""A one-step quiz pipeline with outcome checks, an LLM judge among them.

``answer`` asks ``quiz-answer`` (chat completions through the engine's client) for the
capital of the country in the question; ``sim_models.py`` makes it right most of the
time and the judge (``quiz-judge``) grade its answer against the input's ``capital``.
"""

from __future__ import annotations

import quiver


@quiver.node("answer", kind="llm")
def answer(question: str) -> dict[str, str]:
    reply = quiver.llm().chat(messages=[{"role": "user", "content": question}], model="quiz-answer")
    return {"answer": reply.content}


def run(question: str, capital: str) -> dict[str, str]:
    return answer(question)
