"""A pipeline whose call order depends on scheduling.

``fetch`` is called from plain asyncio tasks after random sleeps, so its calls take
their slots in completion order: the same input gives ``fetch#0`` a different item on
different runs. Replay can only match these calls by their input hash.
``JITTER`` seeds the sleeps; tests change it between runs.
"""

from __future__ import annotations

import asyncio
import random

from pydantic import BaseModel

import quiver

JITTER = random.Random(0)


class Size(BaseModel):
    """A tool's typed result (rebuilt from the recorded JSON when replay serves it)."""

    item: str
    size: int


@quiver.node("fetch", kind="tool", restore=Size.model_validate)
def fetch(item: str) -> Size:
    return Size(item=item, size=len(item))


async def _later(item: str) -> Size:
    await asyncio.sleep(JITTER.random() * 0.01)
    return fetch(item)


async def _fetch_all(items: list[str]) -> list[Size]:
    return list(await asyncio.gather(*(_later(i) for i in items)))


@quiver.node("total")
def total(sizes: list[int]) -> int:
    return sum(sizes)


def pipeline(items: list[str]) -> dict[str, object]:
    results = asyncio.run(_fetch_all(items))
    return {"total": total([r.size for r in results]), "items": sorted(r.item for r in results)}
