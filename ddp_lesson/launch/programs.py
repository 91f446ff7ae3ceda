"""Whole programs a launch starts (``python script.py``, ``torchrun ...``): starting and waiting.

:class:`Programs` is the part of :class:`.supervisor.Supervisor` that starts
them; the supervisor's deadline and process tree cover each program and
everything it starts. What a started program is, is :class:`.state.Command`.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence

from .. import reports
from . import capture
from .state import Command, LaunchState
from .watching import AGENT_STORE_ENV, LAUNCH_TAG_ENV, WATCH_S


class Programs:
    """Starts whole programs under one launch and waits for them.

    Args:
        state: the launch's state, shared with the supervisor's other parts;
            every program started is added to ``state.commands``.
    """

    def __init__(self, state: LaunchState):
        self.state = state

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
        state = self.state
        log = state.folder / f"command_{len(state.commands)}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(a) for a in argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self._environment(env or {}),
                pass_fds=tuple(pass_fds),
            )
        command = Command(argv, process, log, kept)
        state.commands.append(command)
        return command

    def _environment(self, changes: dict[str, str | None]) -> dict[str, str]:
        """A program's environment: this process's, the launch's, then ``changes``."""
        state = self.state
        full = {k: v for k, v in {**os.environ, **state.env}.items() if k != AGENT_STORE_ENV}
        full.update(
            {
                LAUNCH_TAG_ENV: state.folder.name,
                reports.REPORT_DIR_ENV: str(state.channel.folder),
                "TMPDIR": str(state.scratch),
                "PYTHONUNBUFFERED": "1",
            }
        )
        for key, value in changes.items():
            if value is None:
                full.pop(key, None)
            else:
                full[key] = value
        return full

    def wait(self, commands: Sequence[Command] | None = None) -> list[int | None]:
        """Wait until ``commands`` (default: all) have ended, or the deadline stopped them.

        Args:
            commands: the programs to wait for; all the launch started by default.
        """
        state = self.state
        commands = list(state.commands if commands is None else commands)
        while any(c.returncode is None for c in commands):
            if state.timed_out and state.done.is_set():
                break
            time.sleep(WATCH_S)
        return [c.returncode for c in commands]
