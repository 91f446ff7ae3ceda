"""Keeping a diagnosed script's writes out of the user's files.

The doctor runs a learner's script for real, and a real script writes:
checkpoints, snapshots, logs, metrics. Written where the script asks,
they would replace the user's own (a week-long run's ``checkpoint.pt``
replaced by a model trained for two steps, a ``snapshot.pt`` the next
real run resumes from). :func:`install` makes every process of a
diagnosed run see its files through a copy-on-write layer instead:

* a file opened for writing or appending, created, deleted, renamed, or
  whose times or mode change, is written under the doctor's own folder
  (``ROOT/files/<absolute path>``); a file kept open for appending is
  copied there first, so the script appends to what it found;
* a file deleted is only marked deleted (``ROOT/gone/<absolute path>``);
* reading, listing and ``os.stat`` see that layer first, then the real
  file system: the script reads its inputs where it expects them, and
  reads back what it wrote (rank 0 saves, the others load it);
* paths of the doctor and the course themselves (``passthrough``) and
  ``/dev``, ``/proc``, ``/sys`` are used as they are.

The layer covers Python's own ways of touching files: ``open`` (and
``io.open``, pathlib, ``numpy.save``, logging's file handlers, everything
built on them), the ``os`` functions that create, change or delete a
path, ``shutil.rmtree``, and ``torch.save``, whose C++ writer opens the
path itself. A C library or another program the script starts writes
where it likes: :func:`programs_started` finds the lines that start a
program, and the doctor says so. Python stops writing ``__pycache__``
folders next to the script too.

Example (in a process of the doctor's, never in the course's own)::

    sandbox.install("/tmp/ddp-lesson-launch-1-doctor-x/sandbox", ["/tmp/ddp-lesson-launch-"])
"""

from __future__ import annotations

import builtins
import io
import os
import shutil
import stat
import sys
from collections.abc import Sequence

#: Paths used as they are, whatever the script does.
SYSTEM = ("/dev", "/proc", "/sys")

#: What :func:`install` replaced: name -> (owner, original).
_original: dict[str, tuple[object, object]] = {}

#: The layer's folders, once installed: {"files": ..., "gone": ..., "pass": (...)}.
_layer: dict[str, object] = {}

# the real functions, for the layer's own use
_open = io.open
_os_open = os.open
_stat = os.stat
_lstat = os.lstat
_listdir = os.listdir
_mkdir = os.mkdir
_makedirs = os.makedirs
_unlink = os.unlink
_rmdir = os.rmdir
_replace = os.replace
_rmtree = shutil.rmtree

#: ``os.open`` flags that change a file.
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _absolute(path, dir_fd: int | None = None) -> str | None:
    """``path`` as a normalised absolute path; ``None`` for an open file descriptor."""
    if isinstance(path, int):
        return None
    text = os.fsdecode(os.fspath(path))
    if not os.path.isabs(text):
        base = os.getcwd() if dir_fd is None else os.readlink(f"/proc/self/fd/{dir_fd}")
        text = os.path.join(base, text)
    return os.path.normpath(text)


#: Names of files torch writes for itself wherever its temporary folder is
#: (``mp.spawn``'s error file per rank, made and removed by the process that
#: starts the ranks): never the script's writes, whichever folder they are in.
TORCH_OWN_NAMES = ("pytorch-errorfile-",)


def _passes(path: str) -> bool:
    """Whether ``path`` is used as it is (the doctor's own, torch's own, or the system's)."""
    if os.path.basename(path).startswith(TORCH_OWN_NAMES):
        return True
    for prefix in _layer["pass"]:
        if path == prefix or path.startswith(prefix if prefix.endswith("-") else prefix + "/"):
            return True
    return False


def _copy_of(path: str) -> str:
    return str(_layer["files"]) + path


def _mark(path: str) -> str:
    # a folder per path: a deleted folder's own mark and its files' marks can coexist
    return os.path.join(str(_layer["gone"]) + path, ".gone")


def _exists(path: str) -> bool:
    try:
        _lstat(path)
    except OSError:
        return False
    return True


def _isdir(path: str) -> bool:
    try:
        return stat.S_ISDIR(_stat(path).st_mode)
    except OSError:
        return False


def _gone(path: str) -> bool:
    """Whether ``path`` or a folder above it was deleted in the layer (and not made again)."""
    while True:
        if _exists(_copy_of(path)):
            return False
        if _exists(_mark(path)):
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent


def _seen(path: str) -> str | None:
    """Where ``path`` is read from: the layer's copy, the real path, or ``None`` (deleted)."""
    copy = _copy_of(path)
    if _exists(copy):
        return copy
    return None if _gone(path) else path


def _present(path: str) -> str | None:
    """Like :func:`_seen`, but ``None`` also when nothing lies there."""
    seen = _seen(path)
    return seen if seen is not None and _exists(seen) else None


def _missing(path: str) -> FileNotFoundError:
    return FileNotFoundError(2, "No such file or directory", path)


def _unmark(path: str) -> None:
    """``path`` exists again: drop its deletion mark, and keep a deleted folder's old files gone."""
    if not _gone(path):
        return
    mark = _mark(path)
    if _exists(mark):
        _unlink(mark)
    real_folder = not _exists(_copy_of(path)) and _isdir(path)
    _makedirs(os.path.dirname(_copy_of(path)), exist_ok=True)
    if real_folder:
        for name in _listdir(path):
            _mark_gone(os.path.join(path, name))


def _mark_gone(path: str) -> None:
    _makedirs(os.path.dirname(_mark(path)), exist_ok=True)
    with _open(_mark(path), "w"):
        pass


def _writable_copy(path: str, keep: bool) -> str:
    """The layer's copy of ``path``, ready to be written; ``keep``: with the content it had."""
    copy = _copy_of(path)
    if _exists(copy):
        return copy
    parent = _present(os.path.dirname(path))
    if parent is None or not _isdir(parent):
        raise _missing(path)  # as the real file system would answer
    existed = _present(path)
    _unmark(path)
    _makedirs(os.path.dirname(copy), exist_ok=True)
    if existed is not None and _isdir(existed):
        _mkdir(copy)
    elif existed is not None and keep:
        shutil.copy2(existed, copy)  # (a path of the layer's own: passes)
    return copy


def _for_writing(path, keep: bool, dir_fd: int | None = None):
    """What to hand the real function that writes ``path``."""
    where = _absolute(path, dir_fd)
    if where is None or _passes(where):
        return path
    return _writable_copy(where, keep)


def _for_reading(path, dir_fd: int | None = None):
    where = _absolute(path, dir_fd)
    if where is None or _passes(where):
        return path
    seen = _seen(where)
    if seen is None:
        raise _missing(os.fsdecode(os.fspath(path)))
    return seen


def _writes(mode: str) -> bool:
    return any(flag in mode for flag in "wxa+")


def _opened(original):
    def open(file, mode="r", *args, **kwargs):
        if isinstance(file, int):
            return original(file, mode, *args, **kwargs)
        if _writes(mode):
            where = _absolute(file)
            if not _passes(where) and "x" in mode and _present(where):
                raise FileExistsError(17, "File exists", os.fsdecode(os.fspath(file)))
            keep = "a" in mode or ("r" in mode and "+" in mode)
            target = _for_writing(file, keep)
        else:
            target = _for_reading(file)
        return original(target, mode, *args, **kwargs)

    return open


def _os_opened(path, flags, mode=0o777, *, dir_fd=None):
    if flags & _WRITES:
        where = _absolute(path, dir_fd)
        if not _passes(where) and flags & os.O_CREAT and flags & os.O_EXCL and _present(where):
            raise FileExistsError(17, "File exists", os.fsdecode(os.fspath(path)))
        target = _for_writing(path, keep=not flags & os.O_TRUNC, dir_fd=dir_fd)
    else:
        target = _for_reading(path, dir_fd)
    return _os_open(target, flags, mode, dir_fd=None if target is not path else dir_fd)


def _stat_of(original):
    def stat_(path, *, dir_fd=None, **follow_symlinks):
        target = _for_reading(path, dir_fd)
        fd = None if target is not path else dir_fd
        return original(target, dir_fd=fd, **follow_symlinks)

    return stat_


def _listed(path="."):
    where = _absolute(path)
    if where is None or _passes(where):
        return _listdir(path)
    seen = _seen(where)
    if seen is None:
        raise _missing(os.fsdecode(os.fspath(path)))
    names = set()
    if seen == where or (_isdir(where) and not _gone(where)):
        names.update(_listdir(where))
    if _exists(_copy_of(where)):
        names.update(_listdir(_copy_of(where)))
    names = sorted(n for n in names if _present(os.path.join(where, n)))
    return [os.fsencode(n) for n in names] if isinstance(path, bytes) else names


def _removed(folder: bool):
    def remove(path, *, dir_fd=None):
        where = _absolute(path, dir_fd)
        if _passes(where):
            return (_rmdir if folder else _unlink)(path, dir_fd=dir_fd)
        seen = _present(where)
        if seen is None:
            raise _missing(os.fsdecode(os.fspath(path)))
        if folder:
            if _listed(where):
                raise OSError(39, "Directory not empty", os.fsdecode(os.fspath(path)))
        elif stat.S_ISDIR(_lstat(seen).st_mode):
            raise IsADirectoryError(21, "Is a directory", os.fsdecode(os.fspath(path)))
        _drop(where)

    return remove


def _drop(where: str) -> None:
    """Delete ``where`` in the layer: its copy goes, the real path gets a mark."""
    copy = _copy_of(where)
    if _isdir(copy) and not stat.S_ISLNK(_lstat(copy).st_mode):
        _rmtree(copy)
    elif _exists(copy):
        _unlink(copy)
    if _exists(where):
        _mark_gone(where)


def _rmtree_layer(path, ignore_errors=False, onerror=None, *args, **kwargs):
    where = _absolute(path, kwargs.get("dir_fd"))
    if where is None or _passes(where):
        return _rmtree(path, ignore_errors, onerror, *args, **kwargs)
    if _present(where) is None:
        if ignore_errors:
            return None
        raise _missing(os.fsdecode(os.fspath(path)))
    _drop(where)
    return None


def _moved(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
    source, target = _absolute(src, src_dir_fd), _absolute(dst, dst_dir_fd)
    if _passes(source) and _passes(target):
        return _replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
    seen = source if _passes(source) else _present(source)
    if seen is None:
        raise _missing(os.fsdecode(os.fspath(src)))
    into = target if _passes(target) else _writable_copy(target, keep=False)
    if _isdir(into) and not _isdir(seen):
        raise IsADirectoryError(21, "Is a directory", os.fsdecode(os.fspath(dst)))
    if _isdir(seen):
        if _isdir(into):
            _rmtree(into)
        shutil.copytree(seen, into, symlinks=True)
    else:
        shutil.copy2(seen, into)
    if _passes(source):
        _unlink(source)
    else:
        _drop(source)


def _made_folder(path, mode=0o777, *, dir_fd=None):
    where = _absolute(path, dir_fd)
    if _passes(where):
        return _mkdir(path, mode, dir_fd=dir_fd)
    if _present(where):
        raise FileExistsError(17, "File exists", os.fsdecode(os.fspath(path)))
    copy = _writable_copy(where, keep=False)
    if not _exists(copy):
        _mkdir(copy, mode)
    return None


def _changed(original, keep: bool = True):
    """A function that changes a path's data or metadata (``utime``, ``chmod``, ``truncate``)."""

    def change(path, *args, **kwargs):
        if isinstance(path, int):
            return original(path, *args, **kwargs)
        dir_fd = kwargs.pop("dir_fd", None)
        target = _for_writing(path, keep, dir_fd)
        if target is path and dir_fd is not None:
            kwargs["dir_fd"] = dir_fd
        return original(target, *args, **kwargs)

    return change


def _zipfile_writer(original):
    def writer(name_or_buffer):
        if isinstance(name_or_buffer, (str, os.PathLike)):
            name_or_buffer = os.fsdecode(_for_writing(name_or_buffer, keep=False))
        return original(name_or_buffer)

    return writer


def _replace_in(owner: object, name: str, value: object) -> None:
    key = f"{getattr(owner, '__name__', owner)}.{name}"
    _original.setdefault(key, (owner, getattr(owner, name)))
    setattr(owner, name, value)


def root(folder: str) -> str:
    """The layer's folder inside a run's folder (one per run, shared by its processes)."""
    return os.path.join(folder, "sandbox")


def install(root: str, passthrough: Sequence[str] = ()) -> None:
    """Send this process's writes outside ``passthrough`` into ``root``, for good.

    Meant for a process that runs a diagnosed script and then ends; the
    processes it forks inherit the layer (installing again is a no-op).

    Args:
        root: a folder of the doctor's, shared by every process of one run
            (created here); what the script wrote lies under it.
        passthrough: paths (or prefixes ending in ``-``) used as they are:
            the doctor's and the launch's own folders.
    """
    if _layer:
        return
    root = os.path.abspath(root)
    _layer.update(
        files=os.path.join(root, "files"),
        gone=os.path.join(root, "gone"),
        **{"pass": (root, *SYSTEM, *passthrough)},
    )
    _makedirs(root, exist_ok=True)
    sys.dont_write_bytecode = True  # no __pycache__ beside the learner's modules
    opened = _opened(_open)
    _replace_in(builtins, "open", opened)
    _replace_in(io, "open", opened)
    _replace_in(os, "open", _os_opened)
    _replace_in(os, "stat", _stat_of(_stat))
    _replace_in(os, "lstat", _stat_of(_lstat))
    _replace_in(os, "listdir", _listed)
    _replace_in(os, "mkdir", _made_folder)
    _replace_in(os, "remove", _removed(folder=False))
    _replace_in(os, "unlink", _removed(folder=False))
    _replace_in(os, "rmdir", _removed(folder=True))
    _replace_in(os, "rename", _moved)
    _replace_in(os, "replace", _moved)
    _replace_in(os, "utime", _changed(os.utime))
    _replace_in(os, "chmod", _changed(os.chmod))
    _replace_in(os, "truncate", _changed(os.truncate))
    _replace_in(shutil, "rmtree", _rmtree_layer)
    serialization = sys.modules.get("torch.serialization")
    if serialization is not None:
        writer = _zipfile_writer(serialization._open_zipfile_writer)
        _replace_in(serialization, "_open_zipfile_writer", writer)


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


#: Calls that start another program, whose writes no Python layer can see.
STARTERS = {
    ("subprocess", "run"), ("subprocess", "call"), ("subprocess", "check_call"),
    ("subprocess", "check_output"), ("subprocess", "Popen"), ("os", "system"),
    ("os", "popen"), ("os", "posix_spawn"), ("os", "posix_spawnp"),
}


def programs_started(source: str) -> list[int]:
    r"""The lines of ``source`` that start another program (``subprocess.run``, ``os.system``...).

    What such a program writes is not redirected: the doctor says so.

    >>> programs_started("import os\nos.system('cp a b')\nprint(1)")
    [2]
    """
    import ast

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else None
            if (name, node.func.attr) in STARTERS or (
                name == "os" and node.func.attr.startswith(("spawn", "exec"))
            ):
                lines.append(node.lineno)
    return sorted(set(lines))
