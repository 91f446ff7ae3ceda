"""Whole programs a launch starts (``python script.py``, ``torchrun ...``): starting and waiting.

:class:`Programs` is the part of :class:`.supervisor.Supervisor` that starts
them; the supervisor's deadline and process tree cover each program and
everything it starts.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from .. import reports
from . import capture
from .watching import AGENT_STORE_ENV, LAUNCH_TAG_ENV, WATCH_S


class Command:
    """A whole program started by a supervisor, in a session of its own.

    Attributes:
        argv: what was run.
        process: the ``subprocess.Popen``.
        log: the file its output went to (inside the launch's folder).
    """

    def __init__(
        self, argv: Sequence[str], process: subprocess.Popen, log: Path, kept: int
    ):
        self.argv = [str(a) for a in argv]
        self.process = process
        self.log = log
        self.kept = kept
        self._output: str | None = None

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    @property
    def output(self) -> str:
        """What it printed (head and tail, see :mod:`.capture`); read once it has ended."""
        if self._output is None:
            self._output = capture.read_kept(self.log, self.kept)
        return self._output


class Programs:
    """Starting whole programs under a launch (mixed into :class:`.supervisor.Supervisor`)."""

    def command(
        self,
        argv: Sequence[object],
        *,
        env: dict[str, str | None] | None = None,
        pass_fds: Sequence[int] = (),
        kept: int = capture.OUTPUT_KEPT_BYTES,
    ) -> Command:
        """Start a whole program (``python script.py ...``, ``torchrun ...``) under this launch.

        It runs in a session of its own with its output in a file of the
        launch's folder; the launch's deadline and tree stop cover it and
        everything it starts. Its processes find the launch's report folder
        in ``$DDP_LESSON_REPORT_DIR``.

        Args:
            argv: the command line.
            env: variables to set (or, with value ``None``, remove) on top of
                this process's environment.
            pass_fds: open file descriptors the program inherits.
            kept: bytes of its output kept, head and tail.
        """
        full = {k: v for k, v in {**os.environ, **self.env}.items() if k != AGENT_STORE_ENV}
        full.update(
            {
                LAUNCH_TAG_ENV: self.folder.name,
                reports.REPORT_DIR_ENV: str(self.channel.folder),
                "TMPDIR": str(self.scratch),
                "PYTHONUNBUFFERED": "1",
            }
        )
        for key, value in (env or {}).items():
            if value is None:
                full.pop(key, None)
            else:
                full[key] = value
        log = self.folder / f"command_{len(self.commands)}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(a) for a in argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=full,
                pass_fds=tuple(pass_fds),
            )
        command = Command(argv, process, log, kept)
        self.commands.append(command)
        return command

    def wait(self, commands: Sequence[Command] | None = None) -> list[int | None]:
        """Wait until ``commands`` (default: all) have ended, or the deadline stopped them."""
        commands = list(self.commands if commands is None else commands)
        while any(c.returncode is None for c in commands):
            if self.timed_out and self._done.is_set():
                break
            time.sleep(WATCH_S)
        return [c.returncode for c in commands]
