"""The doctor's copy-on-write layer: where each path of a diagnosed run really lies.

:mod:`.sandbox` replaces Python's file functions in a diagnosed process;
each replacement asks this module where to read or write a path:

* :func:`for_writing`: the layer's copy (``ROOT/files/<absolute path>``),
  made first, with the content it had where the call keeps it;
* :func:`for_reading`: the layer's copy if there is one, else the real
  path, and :func:`missing` if the run deleted it (``ROOT/gone/...``);
* :func:`listed`: a folder's names as the run sees them;
* :func:`passes`: paths used as they are (the doctor's and the launch's
  own folders, ``/dev``, ``/proc``, ``/sys`` and torch's own error files).

:func:`configure` sets the layer up once per process; :func:`written`
and :func:`remove_torch_files` are for the doctor once the run is over.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat
from collections.abc import Sequence

#: Paths used as they are, whatever the script does.
SYSTEM = ("/dev", "/proc", "/sys")

#: The layer's folders, once configured: {"root", "files", "gone", "pass"}. One
#: per process: a diagnosed process and the ranks it forks share one layer.
_layer: dict[str, object] = {}

# the real functions, for the layer's own use (the sandbox replaces the os ones)
_open = io.open
_stat = os.stat
_lstat = os.lstat
_listdir = os.listdir
_mkdir = os.mkdir
_makedirs = os.makedirs
_unlink = os.unlink
_rmtree = shutil.rmtree


def configure(root: str, passthrough: Sequence[str] = ()) -> bool:
    """Put this process's layer under ``root``; ``False`` if it already has one.

    Args:
        root: the layer's folder (created here), shared by a run's processes.
        passthrough: paths, or prefixes ending in ``-``, used as they are.
    """
    if _layer:
        return False
    root = os.path.abspath(root)
    _layer.update(
        root=root,
        files=os.path.join(root, "files"),
        gone=os.path.join(root, "gone"),
        **{"pass": (root, *SYSTEM, *passthrough)},
    )
    _makedirs(root, exist_ok=True)
    return True


def absolute(path, dir_fd: int | None = None) -> str | None:
    """``path`` as a normalised absolute path; ``None`` for an open file descriptor."""
    if isinstance(path, int):
        return None
    text = os.fsdecode(os.fspath(path))
    if not os.path.isabs(text):
        base = os.getcwd() if dir_fd is None else os.readlink(f"/proc/self/fd/{dir_fd}")
        text = os.path.join(base, text)
    return os.path.normpath(text)


#: Names of files torch writes for itself wherever its temporary folder is
#: (``mp.spawn``'s error file, written by a rank that raised and read by the
#: process that started it, which never removes it): never the script's
#: writes, whichever folder they are in. They are used as they are, noted
#: under the layer's ``torch-own`` folder, and removed by
#: :func:`remove_torch_files` when the run is over.
TORCH_OWN_NAMES = ("pytorch-errorfile-",)


def torch_own(path: str) -> bool:
    return os.path.basename(path).startswith(TORCH_OWN_NAMES)


def note_torch_own(path: str) -> None:
    notes = os.path.join(_layer["root"], "torch-own")
    _makedirs(notes, exist_ok=True)
    with _open(os.path.join(notes, os.path.basename(path)), "w") as note:
        note.write(path)


def passes(path: str) -> bool:
    """Whether ``path`` is used as it is (the doctor's own, torch's own, or the system's)."""
    if torch_own(path):
        return True
    for prefix in _layer["pass"]:
        if path == prefix or path.startswith(prefix if prefix.endswith("-") else prefix + "/"):
            return True
    return False


def copy_of(path: str) -> str:
    return str(_layer["files"]) + path


def mark_of(path: str) -> str:
    # a folder per path: a deleted folder's own mark and its files' marks can coexist
    return os.path.join(str(_layer["gone"]) + path, ".gone")


def lexists(path: str) -> bool:
    try:
        _lstat(path)
    except OSError:
        return False
    return True


def is_folder(path: str) -> bool:
    try:
        return stat.S_ISDIR(_stat(path).st_mode)
    except OSError:
        return False


def is_gone(path: str) -> bool:
    """Whether ``path`` or a folder above it was deleted in the layer (and not made again)."""
    while True:
        if lexists(copy_of(path)):
            return False
        if lexists(mark_of(path)):
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent


def seen_at(path: str) -> str | None:
    """Where ``path`` is read from: the layer's copy, the real path, or ``None`` (deleted)."""
    copy = copy_of(path)
    if lexists(copy):
        return copy
    return None if is_gone(path) else path


def present_at(path: str) -> str | None:
    """Like :func:`seen_at`, but ``None`` also when nothing lies there."""
    seen = seen_at(path)
    return seen if seen is not None and lexists(seen) else None


def missing(path: str) -> FileNotFoundError:
    return FileNotFoundError(2, "No such file or directory", path)


def unmark(path: str) -> None:
    """``path`` exists again: drop its deletion mark, and keep a deleted folder's old files gone."""
    if not is_gone(path):
        return
    mark = mark_of(path)
    if lexists(mark):
        _unlink(mark)
    real_folder = not lexists(copy_of(path)) and is_folder(path)
    _makedirs(os.path.dirname(copy_of(path)), exist_ok=True)
    if real_folder:
        for name in _listdir(path):
            mark_gone(os.path.join(path, name))


def mark_gone(path: str) -> None:
    _makedirs(os.path.dirname(mark_of(path)), exist_ok=True)
    with _open(mark_of(path), "w"):
        pass


def writable_copy(path: str, keep: bool) -> str:
    """The layer's copy of ``path``, ready to be written; ``keep``: with the content it had."""
    copy = copy_of(path)
    if lexists(copy):
        return copy
    parent = present_at(os.path.dirname(path))
    if parent is None or not is_folder(parent):
        raise missing(path)  # as the real file system would answer
    existed = present_at(path)
    unmark(path)
    _makedirs(os.path.dirname(copy), exist_ok=True)
    if existed is not None and is_folder(existed):
        _mkdir(copy)
    elif existed is not None and keep:
        shutil.copy2(existed, copy)  # (a path of the layer's own: passes)
    return copy


def for_writing(path, keep: bool, dir_fd: int | None = None):
    """What to hand the real function that writes ``path``."""
    where = absolute(path, dir_fd)
    if where is None or passes(where):
        return path
    return writable_copy(where, keep)


def for_reading(path, dir_fd: int | None = None):
    where = absolute(path, dir_fd)
    if where is None or passes(where):
        return path
    seen = seen_at(where)
    if seen is None:
        raise missing(os.fsdecode(os.fspath(path)))
    return seen


def writes(mode: str) -> bool:
    return any(flag in mode for flag in "wxa+")


def listed(path="."):
    where = absolute(path)
    if where is None or passes(where):
        return _listdir(path)
    seen = seen_at(where)
    if seen is None:
        raise missing(os.fsdecode(os.fspath(path)))
    names = set()
    if seen == where or (is_folder(where) and not is_gone(where)):
        names.update(_listdir(where))
    if lexists(copy_of(where)):
        names.update(_listdir(copy_of(where)))
    names = sorted(n for n in names if present_at(os.path.join(where, n)))
    return [os.fsencode(n) for n in names] if isinstance(path, bytes) else names


def drop(where: str) -> None:
    """Delete ``where`` in the layer: its copy goes, the real path gets a mark."""
    copy = copy_of(where)
    if is_folder(copy) and not stat.S_ISLNK(_lstat(copy).st_mode):
        _rmtree(copy)
    elif lexists(copy):
        _unlink(copy)
    if lexists(where):
        mark_gone(where)


def root(folder: str) -> str:
    """The layer's folder inside a run's folder (one per run, shared by its processes)."""
    return os.path.join(folder, "sandbox")


def written(root: str) -> list[str]:
    """The user's paths a run under ``root`` wrote or deleted (kept in the layer), sorted."""
    found = set()
    files, gone = os.path.join(root, "files"), os.path.join(root, "gone")
    for top, folders, names in os.walk(files):
        found.update(os.path.join(top, n)[len(files) :] for n in names)
        real = top[len(files) :]
        # a folder made and left empty; not one that was there already (the
        # layer makes the folders above a file it keeps, and the file may go)
        if not folders and not names and top != files and not os.path.isdir(real):
            found.add(real)
    for top, _, names in os.walk(gone):
        if ".gone" in names:
            found.add(top[len(gone) :])
    return sorted(found)


def remove_torch_files(root: str) -> list[str]:
    """Remove the files torch wrote for itself in a run under ``root``; return their paths.

    ``mp.spawn`` leaves a rank's error file in the temporary folder once
    it has read it; the doctor's run should leave nothing behind.
    """
    notes = os.path.join(root, "torch-own")
    removed = []
    for name in sorted(os.listdir(notes)) if os.path.isdir(notes) else []:
        with open(os.path.join(notes, name)) as note:
            path = note.read()
        if os.path.basename(path) == name:  # the note names its own file, nothing else
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
                removed.append(path)
    return removed
