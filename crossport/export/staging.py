"""All outputs of one command land together or not at all, and never over the user's files.

A :class:`Staging` hands out temporary paths in a hidden folder beside each target
(``.crossport-<id>.partial``, same filesystem, so the final moves are renames). Writers
write and re-check there; :meth:`Staging.commit` re-checks every target and moves all of
them into place, restoring what it replaced if any move fails. An existing target is
replaced only with ``overwrite=True``, and only by an artifact of the same kind: a file
by a file, a SavedModel directory by a SavedModel. A directory that is not a SavedModel is
never written into or replaced.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from crossport.errors import ExportError

FILE = "file"
SAVED_MODEL = "saved_model"


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def check_target(target: Path, kind: str, overwrite: bool) -> None:
    """Raise ``ExportError`` unless ``target`` is free, or replaceable with ``overwrite``."""
    target = Path(target)
    if not _exists(target):
        return
    is_dir = target.is_dir()
    if is_dir and not (target / "saved_model.pb").is_file():
        raise ExportError(
            f"{target} is an existing directory; crossport never writes into or replaces a "
            f"folder it did not write: name a new path (e.g. {target / 'model.keras'}, or a "
            f"new SavedModel directory)")
    what = "a SavedModel directory" if is_dir else "a file"
    if not overwrite:
        raise ExportError(f"{target} already exists ({what}); nothing was written. Pass "
                          f"overwrite=True (CLI: --overwrite) to replace it, or name a new path")
    if is_dir != (kind == SAVED_MODEL):
        wanted = "a SavedModel directory" if kind == SAVED_MODEL else "a file"
        raise ExportError(f"{target} is {what}, the output is {wanted}; overwrite replaces an "
                          f"artifact of the same kind only: remove it yourself or name a new "
                          f"path")


@dataclass
class _Entry:
    target: Path
    temp: Path
    kind: str
    optional: bool
    backup: Path | None = None
    moved_in: bool = False


class Staging:
    """Temporary paths for a command's outputs, committed together.

    Example:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> with Staging() as staging:
        ...     staging.claim(folder / "a.txt").write_text("a")
        ...     staging.claim(folder / "b.txt").write_text("b")
        ...     staging.commit()
        1
        1
        >>> sorted(p.name for p in folder.iterdir())
        ['a.txt', 'b.txt']
    """

    def __init__(self, overwrite: bool = False):
        self.overwrite = overwrite
        self._entries: list[_Entry] = []
        self._folders: dict[Path, Path] = {}
        self._created: list[Path] = []  # parent folders this staging made, outermost first
        self._committed = False

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc_info) -> None:
        self._cleanup(keep_parents=self._committed)

    def claim(self, target: Path, kind: str = FILE, *, optional: bool = False) -> Path:
        """The temporary path to write ``target`` at; fails now if ``target`` is taken.

        ``optional``: the writer may leave the temporary path absent; then an existing
        ``target`` (a stale file, replaceable only with ``overwrite``) is removed at commit.
        """
        target = Path(target).expanduser()
        check_target(target, kind, self.overwrite)
        if any(e.target.resolve() == target.resolve() for e in self._entries):
            raise ExportError(f"{target} is named twice as an output")
        folder = self._folder(target.parent)
        entry = _Entry(target, folder / "new" / target.name, kind, optional)
        self._entries.append(entry)
        return entry.temp

    def commit(self) -> None:
        """Re-check every target, then move every output into place, or none of them."""
        for entry in self._entries:
            check_target(entry.target, entry.kind, self.overwrite)
            if not entry.optional and not _exists(entry.temp):
                raise ExportError(f"{entry.target} was not written; nothing was changed")
        try:
            for entry in self._entries:
                self._move_in(entry)
        except OSError as exc:
            self._roll_back()
            raise ExportError(f"moving the outputs into place failed ({exc}); every output "
                              f"was rolled back, nothing was changed") from exc
        self._committed = True

    def _folder(self, parent: Path) -> Path:
        key = parent.resolve() if parent.exists() else parent.absolute()
        if key not in self._folders:
            self._make_parents(parent)
            folder = parent / f".crossport-{uuid.uuid4().hex[:8]}.partial"
            try:
                (folder / "new").mkdir(parents=True)
                (folder / "old").mkdir()
            except OSError as exc:  # a file where a folder should be, no permission
                raise ExportError(f"cannot write in {parent}: {exc.strerror}") from exc
            self._folders[key] = folder
        return self._folders[key]

    def _make_parents(self, parent: Path) -> None:
        missing = []
        while not _exists(parent):
            missing.append(parent)
            parent = parent.parent
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except OSError as exc:
                raise ExportError(f"cannot create the folder {folder}: {exc.strerror}") from exc
            self._created.append(folder)

    def _move_in(self, entry: _Entry) -> None:
        if _exists(entry.target):
            entry.backup = entry.temp.parent.parent / "old" / entry.target.name
            if _exists(entry.temp) and entry.kind == FILE:
                _keep(entry.target, entry.backup)  # keep the old file ...
                os.replace(entry.temp, entry.target)  # ... and swap atomically
                entry.moved_in = True
                return
            os.rename(entry.target, entry.backup)  # a directory: no atomic swap exists
        if _exists(entry.temp):
            os.rename(entry.temp, entry.target)
            entry.moved_in = True

    def _roll_back(self) -> None:
        for entry in reversed(self._entries):
            if entry.moved_in and entry.backup is None:
                _remove(entry.target)
            if entry.backup is not None and _exists(entry.backup):
                if entry.kind == FILE and entry.moved_in:
                    os.replace(entry.backup, entry.target)
                else:
                    if entry.moved_in:
                        _remove(entry.target)
                    os.rename(entry.backup, entry.target)

    def _cleanup(self, keep_parents: bool) -> None:
        for folder in self._folders.values():
            shutil.rmtree(folder, ignore_errors=True)
        if not keep_parents:
            for folder in reversed(self._created):
                try:
                    folder.rmdir()  # only if still empty
                except OSError:
                    break


def _keep(path: Path, backup: Path) -> None:
    try:
        os.link(path, backup, follow_symlinks=False)
    except OSError:  # a filesystem without hard links
        shutil.copy2(path, backup, follow_symlinks=False)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif _exists(path):
        path.unlink()
