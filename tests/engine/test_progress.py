"""Progress lines say what they count and give no ETA before the rate is measured.

The README campaign's first line read ``replays: 1/5988  2.8/s  elapsed 0s  ETA 35m20s``
for a run of about a minute, and ``paired 256`` and ``pairs: 256/356`` said not what they
counted. A clock the test turns stands for time: no sleep, nothing timed.
"""

from __future__ import annotations

import io

from quiver._progress import MEASURE_ITEMS, MEASURE_S, Progress, StageProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_no_eta_until_the_rate_is_measured() -> None:
    clock, out = Clock(), io.StringIO()
    bar = Progress("replays", 5988, stream=out, interval_s=0, clock=clock)
    clock.now += 0.36  # start-up: the first replay took long
    bar.advance()
    clock.now += MEASURE_S - 0.5  # many done, but not long enough to measure
    bar.advance(300)
    clock.now += 0.5
    bar.advance(MEASURE_ITEMS)
    first, second, third = _lines(out)
    assert first == "replays: 1/5,988 replays done  elapsed 0s  ETA: measuring the rate"
    assert "ETA: measuring the rate" in second and "/s" not in second
    rate = (300 + MEASURE_ITEMS) / MEASURE_S  # from the first replay done on, start-up left out
    left = (5988 - 306) / rate
    assert third.endswith(f"{rate:.1f}/s  ETA {left:.0f}s"), third


def test_every_counter_says_what_it_counts() -> None:
    clock, out = Clock(), io.StringIO()
    bar = Progress("replays", 100, stream=out, interval_s=0, clock=clock, resumed=10)
    bar.advance(5, failed=1, retries=3, paired=0)
    bar.advance(0, paired=256)
    bar.close()
    last = _lines(out)[-1]
    assert last.startswith("replays: 15/100 replays done (10 resumed)")
    assert last.endswith("1 failed  256 turned into pairs  3 LLM retries"), last
    pairs = Progress("pairs", 5988, stream=out, interval_s=0, clock=clock, resumed=5632,
                     before="paired while replaying")
    pairs.advance(256)
    assert _lines(out)[-1].startswith("pairs: 5,888/5,988 replays paired (5,632 paired while replaying)")


def test_the_last_line_gives_the_rate_and_no_eta() -> None:
    clock, out = Clock(), io.StringIO()
    bar = Progress("record", 225, stream=out, interval_s=1000, clock=clock)
    bar.advance()
    clock.now += 10
    bar.advance(224)
    bar.close()
    assert _lines(out)[-1] == "record: 225/225 traces recorded  elapsed 10s  22.4/s"


def test_an_analysis_stage_says_what_it_counts() -> None:
    out = io.StringIO()
    stages = StageProgress("analysis", out, interval_s=0)
    stages("embedding", 60, 121)
    stages("embedding", 61, 121)
    stages("distances", 111, 111)
    assert [line.split("  elapsed ")[0] for line in _lines(out)] == [
        "analysis: embedding 60/121 texts embedded", "analysis: embedding 121/121 texts embedded",
        "analysis: distances 111/111 aligned calls compared"]
