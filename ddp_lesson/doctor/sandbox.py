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

from ..launch import torch_hooks
from . import layer
from .layer import remove_torch_files, root, written

__all__ = ["install", "programs_started", "remove_torch_files", "root", "written"]

#: What :func:`install` replaced: name -> (owner, original). One per process:
#: the diagnosed process installs once, the ranks it forks inherit it.
_original: dict[str, tuple[object, object]] = {}

# the real functions, for the replacements' own use
_open = io.open
_os_open = os.open
_stat = os.stat
_lstat = os.lstat
_mkdir = os.mkdir
_unlink = os.unlink
_rmdir = os.rmdir
_replace = os.replace
_rmtree = shutil.rmtree
_scandir = os.scandir
_FileIO = io.FileIO
_access = os.access
_symlink = os.symlink
_link = os.link

#: ``os.open`` flags that change a file.
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _file_for(file, mode: str):
    """Where ``open(file, mode)`` really opens ``file`` (a path, not a descriptor)."""
    if not layer.writes(mode):
        return layer.for_reading(file)
    where = layer.absolute(file)
    if "x" in mode and not layer.passes(where) and layer.present_at(where):
        raise FileExistsError(17, "File exists", os.fsdecode(os.fspath(file)))
    if layer.torch_own(where):
        layer.note_torch_own(where)
    return layer.for_writing(file, keep="a" in mode or ("r" in mode and "+" in mode))


def _opened(original):
    def open(file, mode="r", *args, **kwargs):
        target = file if isinstance(file, int) else _file_for(file, mode)
        return original(target, mode, *args, **kwargs)

    return open


def _os_opened(path, flags, mode=0o777, *, dir_fd=None):
    if flags & _WRITES:
        where = layer.absolute(path, dir_fd)
        exclusive = flags & os.O_CREAT and flags & os.O_EXCL
        if exclusive and not layer.passes(where) and layer.present_at(where):
            raise FileExistsError(17, "File exists", os.fsdecode(os.fspath(path)))
        target = layer.for_writing(path, keep=not flags & os.O_TRUNC, dir_fd=dir_fd)
    else:
        target = layer.for_reading(path, dir_fd)
    return _os_open(target, flags, mode, dir_fd=None if target is not path else dir_fd)


def _stat_of(original):
    def stat_(path, *, dir_fd=None, **follow_symlinks):
        target = layer.for_reading(path, dir_fd)
        fd = None if target is not path else dir_fd
        return original(target, dir_fd=fd, **follow_symlinks)

    return stat_


class _Entry:
    """What ``os.scandir`` yields for a name the layer lists (``os.DirEntry``'s interface)."""

    def __init__(self, folder, name, seen: str):
        self.name, self.path, self._seen = name, os.path.join(folder, name), seen

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return f"<DirEntry {self.name!r}>"

    def stat(self, *, follow_symlinks=True):
        return (_stat if follow_symlinks else _lstat)(self._seen)

    def inode(self):
        return _lstat(self._seen).st_ino

    def _mode(self, follow_symlinks: bool) -> int:
        try:
            return self.stat(follow_symlinks=follow_symlinks).st_mode
        except OSError:
            return 0

    def is_dir(self, *, follow_symlinks=True):
        return stat.S_ISDIR(self._mode(follow_symlinks))

    def is_file(self, *, follow_symlinks=True):
        return stat.S_ISREG(self._mode(follow_symlinks))

    def is_symlink(self):
        return stat.S_ISLNK(self._mode(False))


class _Scan:
    """``os.scandir``'s iterator over the layer's entries, usable in a ``with`` block."""

    def __init__(self, entries):
        self._entries = iter(entries)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._entries)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def close(self):
        self._entries = iter(())


def _scanned(path="."):
    where = layer.absolute(path)
    if where is None or layer.passes(where):
        return _scandir(path)
    folder = "." if path in (".", b".") else path
    return _Scan(
        [_Entry(folder, name, layer.present_at(os.path.join(where, os.fsdecode(name))))
         for name in layer.listed(path)]
    )  # fmt: skip


class _LayeredFileIO(_FileIO):
    """``io.FileIO`` opened through the layer (``builtins.open`` does not use this name)."""

    def __init__(self, file, mode="r", closefd=True, opener=None):
        target = file if isinstance(file, int) else _file_for(file, mode)
        super().__init__(target, mode, closefd, opener)


def _accessed(path, mode, *, dir_fd=None, **kwargs):
    if isinstance(path, int):
        return _access(path, mode, **kwargs)
    try:
        target = layer.for_reading(path, dir_fd)
    except FileNotFoundError:
        return False
    return _access(target, mode, dir_fd=None if target is not path else dir_fd, **kwargs)


def _symlinked(src, dst, target_is_directory=False, *, dir_fd=None):
    """``os.symlink``: the link is made in the layer and leads into the layer.

    A link to a file the user has is made to a copy of it, so that writing
    through the link never reaches the user's file; a link to a folder
    leads to the layer's folder of that name, which shows what the run
    wrote there, not the user's files in it.
    """
    where = layer.absolute(dst, dir_fd)
    if layer.passes(where):
        return _symlink(src, dst, target_is_directory, dir_fd=dir_fd)
    if layer.present_at(where):
        raise FileExistsError(17, "File exists", os.fsdecode(os.fspath(dst)))
    text = os.fsdecode(src)
    pointed = os.path.normpath(os.path.join(os.path.dirname(where), text))
    if not layer.passes(pointed):
        if layer.present_at(pointed) == pointed:  # only the user's: take a copy first
            layer.writable_copy(pointed, keep=True)
        # (a relative link already leads there: the layer mirrors the folders)
        text = layer.copy_of(pointed) if os.path.isabs(text) else text
    _symlink(text, layer.writable_copy(where, keep=False), target_is_directory)
    return None


def _hard_linked(src, dst, *, src_dir_fd=None, dst_dir_fd=None, follow_symlinks=True):
    """``os.link``: a copy in the layer, not a second name for the user's file."""
    source, where = layer.absolute(src, src_dir_fd), layer.absolute(dst, dst_dir_fd)
    if layer.passes(source) and layer.passes(where):
        return _link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd,
                     follow_symlinks=follow_symlinks)  # fmt: skip
    seen = layer.present_at(source)
    if seen is None:
        raise layer.missing(os.fsdecode(os.fspath(src)))
    if layer.present_at(where):
        raise FileExistsError(17, "File exists", os.fsdecode(os.fspath(dst)))
    into = where if layer.passes(where) else layer.writable_copy(where, keep=False)
    shutil.copy2(seen, into)
    return None


def _removed(folder: bool):
    def remove(path, *, dir_fd=None):
        where = layer.absolute(path, dir_fd)
        if layer.passes(where):
            return (_rmdir if folder else _unlink)(path, dir_fd=dir_fd)
        seen = layer.present_at(where)
        if seen is None:
            raise layer.missing(os.fsdecode(os.fspath(path)))
        if folder:
            if layer.listed(where):
                raise OSError(39, "Directory not empty", os.fsdecode(os.fspath(path)))
        elif stat.S_ISDIR(_lstat(seen).st_mode):
            raise IsADirectoryError(21, "Is a directory", os.fsdecode(os.fspath(path)))
        layer.drop(where)

    return remove


def _rmtree_layer(path, ignore_errors=False, onerror=None, *args, **kwargs):
    where = layer.absolute(path, kwargs.get("dir_fd"))
    if where is None or layer.passes(where):
        return _rmtree(path, ignore_errors, onerror, *args, **kwargs)
    if layer.present_at(where) is None:
        if ignore_errors:
            return None
        raise layer.missing(os.fsdecode(os.fspath(path)))
    layer.drop(where)
    return None


def _moved(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
    source, target = layer.absolute(src, src_dir_fd), layer.absolute(dst, dst_dir_fd)
    if layer.passes(source) and layer.passes(target):
        return _replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
    seen = source if layer.passes(source) else layer.present_at(source)
    if seen is None:
        raise layer.missing(os.fsdecode(os.fspath(src)))
    into = target if layer.passes(target) else layer.writable_copy(target, keep=False)
    if layer.is_folder(into) and not layer.is_folder(seen):
        raise IsADirectoryError(21, "Is a directory", os.fsdecode(os.fspath(dst)))
    if layer.is_folder(seen):
        if layer.is_folder(into):
            _rmtree(into)
        shutil.copytree(seen, into, symlinks=True)
    else:
        shutil.copy2(seen, into)
    if layer.passes(source):
        _unlink(source)
    else:
        layer.drop(source)


def _made_folder(path, mode=0o777, *, dir_fd=None):
    where = layer.absolute(path, dir_fd)
    if layer.passes(where):
        return _mkdir(path, mode, dir_fd=dir_fd)
    if layer.present_at(where):
        raise FileExistsError(17, "File exists", os.fsdecode(os.fspath(path)))
    copy = layer.writable_copy(where, keep=False)
    if not layer.lexists(copy):
        _mkdir(copy, mode)
    return None


def _changed(original, keep: bool = True):
    """A function that changes a path's data or metadata (``utime``, ``chmod``, ``truncate``)."""

    def change(path, *args, **kwargs):
        if isinstance(path, int):
            return original(path, *args, **kwargs)
        dir_fd = kwargs.pop("dir_fd", None)
        target = layer.for_writing(path, keep, dir_fd)
        if target is path and dir_fd is not None:
            kwargs["dir_fd"] = dir_fd
        return original(target, *args, **kwargs)

    return change


def _zipfile_writer(original):
    def writer(name_or_buffer):
        if isinstance(name_or_buffer, (str, os.PathLike)):
            name_or_buffer = os.fsdecode(layer.for_writing(name_or_buffer, keep=False))
        return original(name_or_buffer)

    return writer


def _replace_in(owner: object, name: str, value: object) -> None:
    key = f"{getattr(owner, '__name__', owner)}.{name}"
    _original.setdefault(key, (owner, getattr(owner, name)))
    setattr(owner, name, value)


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
    if not layer.configure(root, passthrough):
        return
    sys.dont_write_bytecode = True  # no __pycache__ beside the learner's modules
    opened = _opened(_open)
    _replace_in(builtins, "open", opened)
    _replace_in(io, "open", opened)
    _replace_in(os, "open", _os_opened)
    _replace_in(os, "stat", _stat_of(_stat))
    _replace_in(os, "lstat", _stat_of(_lstat))
    _replace_in(os, "listdir", layer.listed)
    _replace_in(os, "scandir", _scanned)
    _replace_in(os, "access", _accessed)
    _replace_in(os, "symlink", _symlinked)
    _replace_in(os, "link", _hard_linked)
    _replace_in(io, "FileIO", _LayeredFileIO)
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
    torch_hooks.wrap(torch_hooks.ZIPFILE_WRITER, _zipfile_writer)


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
