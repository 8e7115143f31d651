"""A pipeline that makes many LLM calls: sequential steps and a parallel pair."""

from __future__ import annotations

import quiver

FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "step",
        "schema": {
            "type": "object",
            "properties": {"label": {"type": "string", "enum": ["keep", "drop"]}, "done": {"type": "boolean"}},
            "required": ["label", "done"],
        },
    },
}

quiver.template("step", user="Step {i}: decide whether to keep or drop: {text}")


@quiver.node("step", kind="llm")
def step(text: str, i: int) -> dict:
    return quiver.llm().chat("step", text=text, i=i, response_format=FORMAT, temperature=0.7).data


@quiver.node("fanout")
def fanout(text: str) -> list[dict]:
    with quiver.ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(step, text, 100 + k) for k in range(2)]
    return [f.result() for f in futures]


def pipeline(text: str) -> list[object]:
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    results: list[object] = [step(text, i) for i in range(3)]
    results.append(fanout(text))
    return results
