"""What the processes of a launch print: collected, bounded, shown after the launch.

A rank that floods its output must fill neither the notebook nor the disk
and must never block, so only the first and the last
:data:`OUTPUT_KEPT_BYTES` bytes are kept, with a line saying how much was
left out in between.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

#: How much output is kept: the first and the last this many bytes.
OUTPUT_KEPT_BYTES = 8 * 1024


class HeadTail:
    """Keeps the first and last ``kept`` bytes of a stream, and counts the rest."""

    def __init__(self, kept: int = OUTPUT_KEPT_BYTES, what: str = "output"):
        self.kept = kept
        self.what = what
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.kept - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail = (self.tail + chunk)[-self.kept :]

    def text(self) -> str:
        """What was kept, with a line where bytes were left out.

        >>> kept = HeadTail(kept=3)
        >>> kept.add(b"abcdefghij")
        >>> print(kept.text())
        abc
        [... 4 bytes of output not shown ...]
        hij
        """
        text = self.head.decode(errors="replace")
        skipped = self.total - len(self.head) - len(self.tail)
        if skipped > 0:
            text += f"\n[... {skipped} bytes of {self.what} not shown ...]\n"
        return text + self.tail.decode(errors="replace")


def read_kept(path: str | os.PathLike, kept: int = OUTPUT_KEPT_BYTES) -> str:
    """The head and tail of a file a process wrote its output to (see :class:`HeadTail`)."""
    keeper = HeadTail(kept)
    with contextlib.suppress(OSError), open(path, "rb") as handle:
        while chunk := handle.read(65536):
            keeper.add(chunk)
    return keeper.text()


class OutputTap:
    """Collects what this process's children write to stdout and stderr.

    Children started with ``mp.spawn`` inherit file descriptors 1 and 2. For
    the length of a launch both point at a named pipe (``path``) that a
    thread drains, so nothing a rank prints is interleaved into the cell.
    Ranks forked from the warm server do not inherit this process's
    descriptors; they open the named pipe themselves.

    Args:
        path: where to make the named pipe (inside the launch's folder).
    """

    def __init__(self, path: str | os.PathLike, kept: int = OUTPUT_KEPT_BYTES):
        self.path = str(path)
        self.kept = HeadTail(kept, "rank output")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        if hasattr(os, "mkfifo"):
            os.mkfifo(self.path)
            read_end = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # no writer yet
            os.set_blocking(read_end, True)
            write_end = os.open(self.path, os.O_WRONLY)
        else:  # no named pipes (Windows): inherited descriptors only
            read_end, write_end = os.pipe()
            self.path = ""
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._reader = threading.Thread(
            target=self._drain, args=(read_end,), name="ddp-lesson-output", daemon=True
        )
        self._reader.start()

    def _drain(self, fd: int) -> None:
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                self.kept.add(chunk)

    @contextlib.contextmanager
    def paused(self):
        """Point fds 1 and 2 back where they were for the block, then at the pipe again.

        A process started inside the block that outlives the launch (the warm
        server) must not hold the pipe open, or the drain never ends.
        """
        sys.stdout.flush()
        sys.stderr.flush()
        pipe = (os.dup(1), os.dup(2))
        try:
            for fd, saved in zip((1, 2), self._saved, strict=True):
                os.dup2(saved, fd)
            yield
        finally:
            for fd, write_end in zip((1, 2), pipe, strict=True):
                os.dup2(write_end, fd)
                os.close(write_end)

    def close(self) -> str:
        """Point fds 1 and 2 back where they were and return what was collected."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for fd, saved in zip((1, 2), self._saved, strict=True):
            os.dup2(saved, fd)  # drops this process's last write end of the pipe
            os.close(saved)
        self._reader.join(timeout=2)
        if self.path:
            with contextlib.suppress(OSError):
                Path(self.path).unlink()
        return self.kept.text()
