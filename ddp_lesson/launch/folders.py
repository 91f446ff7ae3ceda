"""The temporary folders of launches, and removing those a killed process left behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from . import processes

#: Where temporary folders of launches start their names (a stale one is removed).
FOLDER_PREFIX = "ddp-lesson-launch-"

#: Marks, with the owner's pid, the multiprocessing folder that holds a warm server's socket.
SERVER_MARK = "ddp-lesson-server-of-"


def remove_stale_folders(root: str | os.PathLike | None = None) -> list[str]:
    """Remove the folders of launches whose process is gone (a killed kernel's, say).

    A launch removes its own folder when it ends; one whose process was
    killed cannot. Its name carries its pid, so the next launch can tell.
    """
    root = Path(root or tempfile.gettempdir())
    removed = []
    for folder in root.glob(f"{FOLDER_PREFIX}*"):
        try:
            pid = int(folder.name[len(FOLDER_PREFIX) :].split("-", 1)[0])
        except ValueError:
            continue
        if pid != os.getpid() and not processes.alive(pid):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    # multiprocessing's folders that held a warm server's socket, marked by
    # the launch that started it (their owner was killed outright)
    for mark in root.glob(f"pymp-*/{SERVER_MARK}*"):
        try:
            pid = int(mark.name[len(SERVER_MARK) :])
        except ValueError:
            continue
        if pid != os.getpid() and not processes.alive(pid):
            shutil.rmtree(mark.parent, ignore_errors=True)
            removed.append(str(mark.parent))
    return removed
