"""Output folders are written safely: through no link that leaves them, by one command at
a time, never over files a command did not write, and a disk that refuses a write is one
line with everything committed kept.

The campaign is the resume tests' support-bot campaign (``test_campaign_resume``: its
baseline and its uninterrupted *reference*), with its baseline recorded into the run
folder, so that every file a run writes is written here. Each chain below runs in one
run folder, a step after the other, each step a real ``quiver run`` that pays only for
the part of the campaign it gets to; the last step of each chain resumes to the
reference's ``campaign.json``.

* **Links** (:func:`linked`): the run folder is itself a link (to a bigger disk, say:
  that is fine); a link planted at a folder in it, then at each file a run writes in
  turn (``baseline/record.log``, ``baseline/traces.jsonl.partial``,
  ``baseline/summary.json``, ``spec.resolved.json``, ``observational/profile.json``,
  ``observational/report.md``), pointing out of the folder, is refused in one line
  (exit 2) and its target left as it was.
* **One writer** (same chain): a run SIGKILLed once its ledger holds a replay leaves no
  lock that blocks; the resume holds the folder (its lock file names it), and a second
  ``quiver run`` meanwhile is one line naming the holder's PID (exit 2); the resume
  finishes to the reference. The holder is held still with SIGSTOP while the second
  one tries, so nothing depends on timing.
* **Disk full and read-only** (:func:`disk`): in a user and mount namespace of its own
  (``unshare``), the run folder is a small tmpfs: read-only from the start, then too
  small for the baseline, then too small for the replays; each is one line (exit 2)
  naming the file and the way out; the space freed, ``--resume`` finishes to the
  reference.
* **No clobbering**: a folder holding files no command wrote, or another command's
  output, is refused by ``run``, ``record``, ``gate`` and ``attribute`` (one line,
  exit 2) and left as it was; a folder of the same command's earlier output (marked,
  or of a version that did not mark it) is taken, as the README's second ``quiver run``
  shows (the ledger is there: ``--resume``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fuzzing import CliResult, run_cli
from siblings import sibling

_interrupt = sibling("test_interrupt", Path(__file__).parent)
_campaign_resume = sibling("test_campaign_resume", Path(__file__).parent)
_ledger_rows = _interrupt._ledger_rows
Campaign = _campaign_resume.Campaign
campaign, reference = _campaign_resume.campaign, _campaign_resume.reference  # fixtures, used by name

__all__ = ["campaign", "reference"]

DEMO = _campaign_resume.DEMO
CANDIDATE = f"support_bot.planner={DEMO / 'prompts' / 'candidates' / 'planner_strict.txt'}"
RUN_SECONDS = 180.0
USER_FILES = {"report.md": "# my notes\n", "summary.json": '{"mine": true}\n', "pairs.jsonl": '{"a": 1}\n'}
"""A user's own files, named as a campaign's are."""
LINKED = ("baseline/record.log", "baseline/traces.jsonl.partial", "baseline/summary.json", "spec.resolved.json",
          "observational/profile.json", "observational/report.md")
"""The files a run writes, in the order it first writes them: a link at each, in turn."""
VICTIM = b"the user's own file\n"


def _quiver() -> list[str]:
    found = shutil.which("quiver")
    return [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]


def _one_line(result: CliResult) -> str:
    """The one error line of a command that could not run (exit 2)."""
    assert result.code == 2, result.stdout[-2000:] + result.stderr[-2000:]
    (line,) = result.error_lines()
    return line


def _until(what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes]) -> bool:
    """Poll ``ready`` until it is true; False when ``proc`` ends first."""
    deadline = time.monotonic() + RUN_SECONDS
    while not ready():
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            pytest.fail(f"waited {RUN_SECONDS:.0f} s for {what}")
        time.sleep(0.01)
    return True


def _holder(folder: Path) -> int | None:
    """The PID the folder's lock file names, if it names one."""
    try:
        return int(json.loads((folder / ".quiver.lock").read_text(encoding="utf-8"))["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _start(argv: list[str], folder: Path, name: str) -> subprocess.Popen[bytes]:
    """``quiver ARGV`` in a session of its own, its output to ``folder/name.out|.err``."""
    with (folder / f"{name}.out").open("wb") as out, (folder / f"{name}.err").open("wb") as err:
        return subprocess.Popen([*_quiver(), *argv], stdout=out, stderr=err, start_new_session=True)


def _finished(proc: subprocess.Popen[bytes], folder: Path, name: str) -> CliResult:
    proc.wait(timeout=RUN_SECONDS)
    read = (folder / f"{name}.out").read_text(encoding="utf-8"), (folder / f"{name}.err").read_text(encoding="utf-8")
    return CliResult(proc.returncode, *read)


def _same_campaign(reference: Path, out: Path) -> None:
    assert (out / "campaign.json").read_bytes() == (reference / "campaign.json").read_bytes()
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["complete"] and summary["done"] == summary["jobs"] == 16


# --------------------------------------------------------------------------- links and one writer


@dataclass
class Chain:
    """What the links chain saw: each step's result, and what was outside the folder."""

    out: Path
    refused: dict[str, CliResult] = field(default_factory=dict)
    victims: dict[str, bytes] = field(default_factory=dict)
    killed_with: int = 0
    second: CliResult | None = None
    holder: int = 0
    resumed: CliResult | None = None
    seconds: float = 0.0


@pytest.fixture(scope="module")
def linked(campaign: Campaign, reference: Path, tmp_path_factory: pytest.TempPathFactory) -> Chain:
    """The links chain, then the kill and the second writer (see the module docstring)."""
    t0 = time.monotonic()
    root = tmp_path_factory.mktemp("linked")
    spec = campaign.spec(root / "spec", recorded=True)
    disk = root / "bigger_disk"
    disk.mkdir()
    out = spec.parent / "run"
    out.symlink_to(disk, target_is_directory=True)  # the output root itself may be a link
    for name in (".quiver-output", "spec.resolved.json"):  # the start of an earlier run of the spec
        if (reference / name).is_file():
            shutil.copyfile(reference / name, out / name)
    outside = root / "outside"
    outside.mkdir()
    chain = Chain(out)

    (out / "baseline").symlink_to(outside, target_is_directory=True)  # a folder on the way out
    chain.refused["baseline"] = run_cli(["run", str(spec), "--quiet"], seconds=RUN_SECONDS)
    chain.victims["baseline"] = b"".join(sorted(p.name.encode() for p in outside.iterdir()))
    (out / "baseline").unlink()
    for name in LINKED:
        victim = outside / name.replace("/", "_")
        victim.write_bytes(VICTIM)
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).unlink(missing_ok=True)
        (out / name).symlink_to(victim)
        t1 = time.monotonic()
        chain.refused[name] = run_cli(["run", str(spec), "--quiet", "--resume"], seconds=RUN_SECONDS)
        print(f"  link at {name}: {time.monotonic() - t1:.1f} s")
        chain.victims[name] = victim.read_bytes()
        (out / name).unlink()

    ledger = out / "ledger.sqlite"
    first = _start(["run", str(spec), "--quiet", "--resume"], root, "killed")
    try:
        _until("a replay in the ledger", lambda: _ledger_rows(ledger) >= 1, first)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the run and its simulator, as a crash leaves them
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    chain.killed_with = _ledger_rows(ledger)
    print(f"  killed at {chain.killed_with} replay(s): {time.monotonic() - t0:.1f} s from the start")

    resume = _start(["run", str(spec), "--quiet", "--resume"], root, "resume")
    chain.holder = resume.pid
    try:
        if _until("the resume to hold the folder", lambda: _holder(out) == resume.pid, resume):
            os.kill(resume.pid, signal.SIGSTOP)
            try:
                chain.second = run_cli(["run", str(spec), "--quiet"], seconds=RUN_SECONDS)
            finally:
                os.kill(resume.pid, signal.SIGCONT)
        chain.resumed = _finished(resume, root, "resume")
    finally:
        if resume.poll() is None:
            os.killpg(resume.pid, signal.SIGKILL)
            resume.wait()
    chain.seconds = time.monotonic() - t0
    print(f"links chain, kill and second writer: {chain.seconds:.1f} s")
    return chain


@pytest.mark.parametrize("name", ["baseline", *LINKED])
def test_a_link_out_of_the_run_folder_is_refused_and_its_target_left_as_it_was(linked: Chain, name: str) -> None:
    line = _one_line(linked.refused[name])
    assert f"{linked.out / name} is a symbolic link (to " in line, line
    assert "leave the output folder" in line and "remove the link" in line, line
    assert linked.victims[name] == (b"" if name == "baseline" else VICTIM)


def test_a_second_run_on_a_folder_in_use_is_one_line_naming_the_holder(linked: Chain) -> None:
    assert linked.second is not None, "the resume never held the folder (no lock file named it)"
    line = _one_line(linked.second)
    assert f"{linked.out} is in use by quiver run (PID {linked.holder}, since " in line, line
    assert "wait for it to finish or give another --output" in line, line


def test_a_killed_run_leaves_no_lock_that_blocks_and_its_resume_finishes_to_the_reference(
    linked: Chain, reference: Path
) -> None:
    assert linked.resumed is not None
    assert linked.resumed.code == 0, linked.resumed.stderr[-3000:]
    assert 1 <= linked.killed_with < 16
    assert f"({linked.killed_with} from the ledger; ok 16)" in linked.resumed.stdout, linked.resumed.stdout
    _same_campaign(reference, linked.out)
    assert not (linked.out / ".quiver.lock").exists()  # released, and gone with the command


# --------------------------------------------------------------------------- disk full and read-only

DISK_SCRIPT = """\
set -u
M=$1; R=$2; SMALL=$3; MEDIUM=$4; shift 4
step() {{
    date +%s.%N >"$R/$NAME.started"
    "$@" run {spec} --output "$M/run" --quiet $RESUME >"$R/$NAME.out" 2>"$R/$NAME.err"
    echo $? >"$R/$NAME.code"
    date +%s.%N >"$R/$NAME.ended"
}}
mount -t tmpfs -o size=50m tmpfs "$M" && mount -o remount,ro "$M" || exit 97
NAME=read_only; RESUME=""; step "$@"
mount -o remount,rw,size="$SMALL" "$M" || exit 98
NAME=baseline; RESUME=--resume; step "$@"
mount -o remount,size="$MEDIUM" "$M" || exit 98
NAME=replays; step "$@"
mount -o remount,size=50m "$M" || exit 98
NAME=freed; step "$@"
cp -a "$M/run" "$R/run"
"""
"""Inside the namespace: the four steps on one tmpfs (it goes with the namespace, so the
run folder is copied out at the end)."""


def _pages(*paths: Path) -> int:
    """What ``paths`` take on a tmpfs (whole 4 KiB pages)."""
    return sum(-(-p.stat().st_size // 4096) * 4096 for p in paths)


def _unshare_works() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True, text=True)
    return None if proc.returncode == 0 else f"unshare --user --mount is not permitted here: {proc.stderr.strip()}"


@dataclass
class Disk:
    """The four steps' results (``read_only``, ``baseline``, ``replays``, ``freed``) and
    the run folder, copied out of the tmpfs."""

    steps: dict[str, CliResult]
    out: Path


@pytest.fixture(scope="module")
def disk(campaign: Campaign, reference: Path, tmp_path_factory: pytest.TempPathFactory) -> Disk:
    """The four steps: read-only, no room for the baseline, no room for the replays, room."""
    why = _unshare_works()
    if why is not None:
        pytest.skip(why)
    t0 = time.monotonic()
    root = tmp_path_factory.mktemp("disk")
    spec = campaign.spec(root / "spec", recorded=True)
    mount, results = root / "mount", root / "results"
    mount.mkdir()
    results.mkdir()
    observational = [p for p in (reference / "observational").rglob("*") if p.is_file()]
    # room for the baseline, the observational files and the ledger's start, and less than
    # the replays add after them while they run (the ledger's write-ahead log included: the
    # replays themselves are stored as differences from the baseline, a few KB each); the
    # "replays" step checks that the disk filled up there
    medium = _pages(campaign.baseline, *observational) + 256 * 1024
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", DISK_SCRIPT.format(spec=spec),
                           "sh", str(mount), str(results), "64k", str(medium), *_quiver()],
                          capture_output=True, text=True, timeout=4 * RUN_SECONDS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = {}
    for name in ("read_only", "baseline", "replays", "freed"):
        steps[name] = CliResult(int((results / f"{name}.code").read_text()), (results / f"{name}.out").read_text(),
                                (results / f"{name}.err").read_text())
        seconds = float((results / f"{name}.ended").read_text()) - float((results / f"{name}.started").read_text())
        print(f"  {name}: exit {steps[name].code} in {seconds:.1f} s")
    print(f"disk full and read-only chain: {time.monotonic() - t0:.1f} s")
    return Disk(steps, results / "run")


def _disk_line(result: CliResult, reason: str) -> str:
    assert result.code == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "Logging error" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("quiver run: error: "), result.stderr[-3000:]
    assert reason in errors[0], errors[0]
    assert "--resume" in errors[0], errors[0]
    return errors[0]


def test_a_read_only_output_folder_is_one_line(disk: Disk) -> None:
    line = _disk_line(disk.steps["read_only"], "Read-only file system")
    assert "writable" in line, line


def test_a_disk_full_while_recording_the_baseline_is_one_line(disk: Disk) -> None:
    line = _disk_line(disk.steps["baseline"], "No space left on device")
    assert "/run/baseline/" in line and "free space" in line, line


def test_a_disk_full_in_the_replays_is_one_line_and_keeps_what_was_committed(disk: Disk) -> None:
    line = _disk_line(disk.steps["replays"], "No space left on device")
    assert "/run/observational/" not in line and "/run/baseline/" not in line, line
    assert "everything committed so far is kept" in line and "free space" in line, line
    freed = disk.steps["freed"]
    assert freed.code == 0, freed.stderr[-3000:]
    assert " from the ledger; ok 16)" in freed.stdout and "(0 from the ledger" not in freed.stdout, freed.stdout


def test_with_space_freed_the_resume_finishes_to_the_uninterrupted_campaign(disk: Disk, reference: Path) -> None:
    assert disk.steps["freed"].code == 0, disk.steps["freed"].stderr[-3000:]
    _same_campaign(reference, disk.out)
    baseline = json.loads((disk.out / "baseline" / "summary.json").read_text(encoding="utf-8"))
    assert baseline["traces"] == 12 and baseline["resumed"] >= 1  # what the full disk had kept


# --------------------------------------------------------------------------- no clobbering


def _commands(campaign: Campaign, spec: Path) -> dict[str, Callable[[Path], list[str]]]:
    return {
        "run": lambda out: ["run", str(spec), "--output", str(out), "--quiet"],
        "record": lambda out: ["record", str(campaign.root / "record.yaml"), "--output", str(out), "--quiet"],
        "gate": lambda out: ["gate", str(spec), "--candidate", CANDIDATE, "--output", str(out), "--quiet"],
        "attribute": lambda out: ["attribute", str(campaign.baseline), "--spec", str(campaign.root / "record.yaml"),
                                  "--repeats", "1", "--dimensions", "prompt", "--out", str(out)],
    }


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.fixture
def users_folder(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "mine"
    folder.mkdir()
    for name, text in USER_FILES.items():
        (folder / name).write_text(text, encoding="utf-8")
    yield folder


@pytest.mark.parametrize("command", ["run", "record", "gate", "attribute"])
def test_a_folder_of_the_users_own_files_is_refused_and_left_as_it_was(
    campaign: Campaign, users_folder: Path, tmp_path: Path, command: str
) -> None:
    before = _files(users_folder)
    argv = _commands(campaign, campaign.spec(tmp_path / "spec"))[command](users_folder)
    line = _one_line(run_cli(argv, seconds=RUN_SECONDS))
    assert f"{users_folder} holds files quiver did not write (pairs.jsonl, report.md, summary.json)" in line, line
    assert "another --out" in line, line
    assert _files(users_folder) == before


def test_another_commands_output_is_refused_naming_what_it_holds(
    campaign: Campaign, reference: Path, tmp_path: Path
) -> None:
    run_folder = tmp_path / "run"
    shutil.copytree(reference, run_folder)
    before = _files(run_folder)
    line = _one_line(run_cli(_commands(campaign, campaign.spec(tmp_path / "spec"))["record"](run_folder)))
    assert f"{run_folder} holds the output of quiver run (" in line and "ledger.sqlite" in line, line
    assert "quiver record does not write into another command's folder" in line, line
    assert _files(run_folder) == before


@pytest.mark.parametrize("marked", [True, False], ids=["marked", "by-an-earlier-version"])
def test_the_same_commands_earlier_output_is_taken(
    campaign: Campaign, reference: Path, tmp_path: Path, marked: bool
) -> None:
    """The README's first command, run a second time: the ledger is there, ``--resume``
    finishes it (here: it finished already)."""
    spec = campaign.spec(tmp_path / "spec")
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    if not marked:
        (out / ".quiver-output").unlink(missing_ok=True)
    again = _one_line(run_cli(["run", str(spec), "--output", str(out), "--quiet"], seconds=RUN_SECONDS))
    assert f"{out} holds a campaign's ledger already: " in again and "--resume" in again, again
    resumed = run_cli(["run", str(spec), "--output", str(out), "--quiet", "--resume"], seconds=RUN_SECONDS)
    assert resumed.code == 0 and resumed.stdout.startswith("already complete: 16 replays"), resumed
