"""What importing the engine costs a pipeline: ``import quiver``, ``@quiver.node`` and a call.

Each case runs in a fresh interpreter, ``--runs`` times, next to a bare interpreter
start in the same loop (so a loaded machine slows both), and prints the median wall
time, the median time over the bare start, the modules the case loads beyond a bare
start, and which heavy libraries it loads:

* ``import quiver``: the facade alone;
* ``node + call``: ``import quiver``, ``@quiver.node`` on a function, one call outside a
  recording (what a production pipeline pays);
* ``node(fields=...)``: the same with typed field declarations (the graph's validation);
* ``quiver --help``: the command line's parser, every command included;
* ``import quiver.replay.LLMClient``: the first LLM call's imports (the OpenAI SDK);
* ``quiver.analyze``: the analysis stack (numpy, scipy, the estimators).

Run: ``python benchmarks/imports.py [--runs 15]``. ``python -X importtime -c "import
quiver"`` shows the same from the inside.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

HEAVY = ("numpy", "scipy", "pydantic", "yaml", "diskcache", "openai", "httpx", "torch")

CASES = {
    "bare interpreter": "pass",
    "import quiver": "import quiver",
    "node + call": "import quiver\n@quiver.node\ndef f(x):\n    return x\nf(1)",
    "node(fields=...) + call": (
        "import quiver\n@quiver.node('n', fields={'a': {'type': 'categorical', 'role': 'routing'}})\n"
        "def f(x):\n    return {'a': x}\nf('x')"
    ),
    "quiver --help (parser)": "from quiver.experiments._cli import build_parser\nbuild_parser().format_help()",
    "quiver.LLMClient": "import quiver\nquiver.LLMClient",
    "quiver.analyze": "import quiver\nquiver.analyze",
}

PROBE = (
    "\nimport sys\nprint(len(sys.modules), ','.join(m for m in {heavy!r} if m in sys.modules))"
)


def _run(code: str) -> tuple[float, int, str]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code + PROBE.format(heavy=HEAVY)], capture_output=True,
                         text=True, check=True).stdout.split()
    elapsed = time.perf_counter() - start
    return elapsed, int(out[0]), out[1] if len(out) > 1 else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="runs of each case (15)")
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CASES}
    modules: dict[str, int] = {}
    heavy: dict[str, str] = {}
    for _ in range(args.runs):  # interleaved: a slower moment slows every case alike
        for name, code in CASES.items():
            elapsed, count, loaded = _run(code)
            times[name].append(elapsed)
            modules[name], heavy[name] = count, loaded
    bare = statistics.median(times["bare interpreter"])
    print(f"{'case':<26} {'median ms':>10} {'over bare':>10} {'modules':>8}  heavy libraries loaded")
    for name in CASES:
        median = statistics.median(times[name])
        extra = modules[name] - modules["bare interpreter"]
        print(f"{name:<26} {1000 * median:>10.0f} {1000 * (median - bare):>10.0f} {extra:>+8d}  "
              f"{heavy[name] or '-'}")
    print(f"({args.runs} runs each, interleaved; python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
