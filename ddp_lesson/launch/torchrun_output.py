"""What a ``torchrun`` run left: the ranks' reports, torchrun's log, and why it failed.

:class:`TorchrunRun` is what :func:`.elastic.torchrun` and
:func:`.membership.torchrun_resizing` return; :func:`failure_text` turns
torchrun's long failure report into a few lines that name the rank at fault.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import reports

# torch's log prefix: "W1202 19:00:20.492000 4756 torch/distributed/run.py:874] "
_LOG_PREFIX = re.compile(r"^[DIWEF]\d{4} [\d:.]+ \d+ \S+:\d+\] ?")
# process ids, ports and paths inside torchrun's messages
_CHANGING = re.compile(r"(pid: |PID |process |master_port=)\d+")
_BINARY = re.compile(r"of binary: \S+")


@dataclass
class TorchrunRun:
    """What a :func:`torchrun` call did.

    Attributes:
        commands: each invocation as you would type it (one per node); the
            ``--local-addr=127.0.0.1`` the course adds so that nothing listens
            beyond this machine is left out.
        reports: the ranks' reports, sorted by global rank.
        outputs: what each invocation printed (torchrun's log and the ranks'
            output), one string per node.
        restarts: how many times torchrun restarted its worker group, per node.
        elapsed_s: wall time of the whole launch.
        note: how the simulated nodes were given devices, when that needs saying.
    """

    commands: list[str]
    reports: list[dict] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)
    elapsed_s: float = 0.0
    note: str = ""

    @property
    def command(self) -> str:
        """The invocations, one per line."""
        return "\n".join(self.commands)

    def summary(self, columns: Sequence[str], *, digits: int = 4) -> str:
        """The ranks' reports as a table sorted by global rank."""
        return reports.table(self.reports, columns, digits=digits)

    @property
    def printed(self) -> str:
        r"""What the script itself printed, every node's, without torchrun's log lines.

        >>> TorchrunRun(["torchrun x.py"], outputs=["I1202 19:00:20.4 7 a.py:9] hi\nok"]).printed
        'ok'
        """
        lines = (line for output in self.outputs for line in output.splitlines())
        return "\n".join(ln for ln in lines if ln.strip() and not _LOG_PREFIX.match(ln))

    def log(self, *words: str) -> list[str]:
        """torchrun's log messages that contain any of ``words``, without their prefixes.

        Times, process ids and ports change from run to run (they show as
        ``N``); the messages stay.

        >>> line = "W1202 19:00:20.492000 4756 x.py:9] Sending process 5578 closing signal SIGTERM"
        >>> run = TorchrunRun(["torchrun x.py"], outputs=[line])
        >>> run.log("closing")
        ['Sending process N closing signal SIGTERM']
        """
        found = []
        for output in self.outputs:
            for line in output.splitlines():
                message = _CHANGING.sub(r"\1N", _LOG_PREFIX.sub("", line).strip())
                message = _BINARY.sub("of binary: python", message)
                if message and any(w in message for w in words):
                    found.append(message)
        return found


def _failure_blocks(output: str) -> tuple[list[dict[str, str]], int]:
    """torchrun's failure blocks (rank, exitcode, traceback each), and which is its root cause.

    torchrun lists every rank it saw fail, under "Failures:" and one under
    "Root Cause (first observed failure):"; ``(blocks, -1)`` when it printed none.
    """
    blocks: list[dict[str, str]] = []
    root = -1
    for line in output.splitlines():
        line = _LOG_PREFIX.sub("", line)
        if line.startswith("Root Cause (first observed failure):"):
            root = len(blocks)
        elif re.match(r"^\[\d+\]:$", line.strip()):
            blocks.append({})
        elif blocks and line.startswith("  "):
            key, _, value = (part.strip() for part in line.partition(":"))
            if key in ("rank", "exitcode", "traceback") and key not in blocks[-1]:
                blocks[-1][key] = value
    return blocks, (root if 0 <= root < len(blocks) else -1)


def _cause(output: str) -> dict[str, str]:
    r"""The failure that explains a run: a rank torchrun saw killed, else its root cause.

    torchrun's root cause is the failure with the earliest timestamp in whole
    seconds, the first rank on a tie: a rank that raised because its peer was
    killed can come first in the same second. A killed rank raised nothing of
    its own, so it is the cause whichever torchrun names.

    >>> out = "Failures:\n[1]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 7)\n"
    >>> out += "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
    >>> _cause(out + "  exitcode  : 1 (pid: 6)\n")["rank"]
    '1 (local_rank: 1)'
    """
    blocks, root = _failure_blocks(output)
    killed = [b for b in blocks if b.get("exitcode", "").startswith("-")]
    if root >= 0 and (blocks[root] in killed or not killed):
        return blocks[root]
    return killed[0] if killed else {}


def failure_text(run: TorchrunRun, codes: list[int]) -> str:
    """A few lines on why torchrun failed: the failure that explains it, and the rank's error."""
    node = next(i for i, c in enumerate(codes) if c != 0)
    output = run.outputs[node]
    lines = [f"torchrun (node {node}) exited with code {codes[node]}"]
    cause = _cause(output)
    signalled = cause.get("exitcode", "").startswith("-")  # killed: it raised nothing
    for key in ("rank", "exitcode", "traceback"):
        value = cause.get(key, "")
        if value and not value.startswith("Traceback"):
            lines.append(f"  {key}: " + _CHANGING.sub(r"\1N", value))
    errors = []
    for line in output.splitlines():
        message = re.sub(r"^\[rank\d+\]: ", "", _LOG_PREFIX.sub("", line).strip())
        if re.match(r"^[\w.]*(Error|Exception)\b", message) and "ChildFailedError" not in message:
            errors.append(message)
    # A rank that was killed raised nothing: another rank's error is only the
    # consequence (its peer vanished), and whether it came in time is luck.
    if errors and not signalled:
        said = re.sub(r"\]:\d+", "]", errors[-1])  # a port differs on every run
        said = said.split(". ", 1)[0]  # its first sentence: the rest is advice that varies
        lines.append(f"  the rank's error: {said[:200]}")
    lines.append(
        "All of torchrun's output is in the exception's .output (or run.outputs): look "
        "for the worker's traceback above torchrun's summary."
    )
    return "\n".join(lines)
