"""The program files a task's command names, hashed by the submitting client.

The dispatcher reuses a result only for a task identical to the one that made it, and part of a
task's identity is the SHA-256 of each *program file* its command names (editing ``run.py``
must run its tasks again); the dispatcher cannot see the submitter's files, so the client sends
the digests in the task's ``programs`` field. This module follows the Rust client's rule
(crates/diffuse-runtime/src/reuse/programs.rs) exactly, so that both give a task the same
identity:

- the words of the command: each element of an argv list; for a shell string, the pieces
  between blanks and shell punctuation (``;|&()<>`` and backquote), quotes stripped from both
  ends, and for a ``NAME=value`` piece its value;
- a word containing ``{`` (a placeholder), a NUL, or longer than 4096 bytes is skipped;
- a word names a program file when, absolute or relative to the base directory, it is a regular
  file (links followed) that is executable by anyone or whose word ends as a script's does
  (:data:`SCRIPT_ENDINGS`). A data file the command names is not hashed;
- a task with ``"reuse": false`` is left alone;
- each word is looked up once per hasher.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Any, Dict, Iterable, List, MutableMapping, Optional, Tuple, Union

#: Name endings of scripts run by an interpreter named before them (``python3 run.py``).
SCRIPT_ENDINGS = (
    ".py", ".sh", ".bash", ".R", ".r", ".pl", ".rb", ".js", ".jl", ".awk", ".sed", ".lua", ".tcl",
    ".m", ".smk", ".nf", ".wdl", ".cwl", ".jar",
)

#: Characters Rust's ``char::is_whitespace`` takes as blanks (Unicode White_Space; Python's
#: ``str.isspace`` also takes U+001C..U+001F, which Rust does not).
_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)
_SHELL_PUNCTUATION = frozenset(";|&()<>`")
_SEPARATORS = _WHITESPACE | _SHELL_PUNCTUATION

#: Longest word looked up, in bytes.
MAX_WORD = 4096

#: A file's identity on disk: device, inode, size and modification time (ns).
FileStamp = Tuple[int, int, int, int]


def is_script(word: str) -> bool:
    """Whether ``word`` ends as a script's name does."""
    return word.endswith(SCRIPT_ENDINGS)


def shell_words(line: str) -> List[str]:
    """The words of a shell line, roughly: split at blanks and shell punctuation, quotes removed.

    Over-inclusion is harmless (a word that names no file is skipped).
    """
    pieces: List[str] = []
    current: List[str] = []
    for ch in line:
        if ch in _SEPARATORS:
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
    pieces.append("".join(current))
    words = []
    for piece in pieces:
        w = piece.strip("'\"")
        if "=" in w:
            w = w.split("=", 1)[1]
        if w:
            words.append(w)
    return words


def command_words(cmd: Union[str, Iterable[str]]) -> List[str]:
    """The words of a command: an argv list's elements, or a shell string's words."""
    if isinstance(cmd, str):
        return shell_words(cmd)
    return [str(a) for a in cmd]


def sha256_file(path: str) -> str:
    """The lowercase hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class FileDigests:
    """Digests of files by path, kept while the file's device, inode, size and mtime stay the
    same: a long-lived submitter (an executor) hashes an unchanged program once, and an edited
    one again."""

    def __init__(self) -> None:
        self._known: Dict[str, Tuple[FileStamp, str]] = {}

    def digest(self, path: str, st: os.stat_result) -> str:
        """The SHA-256 of ``path``, whose ``os.stat`` is ``st``."""
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        known = self._known.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        sha = sha256_file(path)
        self._known[path] = (stamp, sha)
        return sha


class ProgramHasher:
    """Fills in ``programs`` for tasks that may be reused, looking each word up once.

    Relative words are looked up under the task's ``cwd`` when it has one, else under
    ``base_dir`` (default: the current directory when the hasher is made). ``digests`` may be
    shared between hashers (see :class:`FileDigests`).
    """

    def __init__(
        self,
        base_dir: Union[str, "os.PathLike[str]", None] = None,
        digests: Optional[FileDigests] = None,
    ) -> None:
        self.base = os.path.abspath(os.fspath(base_dir) if base_dir is not None else os.getcwd())
        self._digests = digests if digests is not None else FileDigests()
        self._seen: Dict[str, Optional[str]] = {}

    def fill(self, task: MutableMapping[str, Any]) -> None:
        """Adds the digest of every program file ``task["cmd"]`` names to ``task["programs"]``
        (a task with ``"reuse": false`` is left alone; no field is added when none is found)."""
        if task.get("reuse") is False or "cmd" not in task:
            return
        found: Dict[str, str] = {}
        cwd = task.get("cwd")
        for word in command_words(task["cmd"]):
            sha = self.digest(word, cwd if isinstance(cwd, str) else None)
            if sha is not None:
                found[word] = sha
        if found:
            task["programs"] = {**(task.get("programs") or {}), **found}

    def digest(self, word: str, cwd: Optional[str] = None) -> Optional[str]:
        """The SHA-256 of the program file ``word`` names (relative to ``cwd``, else the
        base), or ``None`` if it names none."""
        key = os.path.join(cwd or self.base, word)
        if key in self._seen:
            return self._seen[key]
        sha = self._lookup(word, cwd or self.base)
        self._seen[key] = sha
        return sha

    def _lookup(self, word: str, base: str) -> Optional[str]:
        if not word or "{" in word or "\0" in word or len(word.encode("utf-8", "surrogatepass")) > MAX_WORD:
            return None
        path = os.path.join(base, word)
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                return None
            if not (st.st_mode & 0o111 or is_script(word)):
                return None
            return self._digests.digest(path, st)
        except (OSError, ValueError):
            return None


def fill_programs(
    tasks: Iterable[MutableMapping[str, Any]],
    base_dir: Union[str, "os.PathLike[str]", None] = None,
    digests: Optional[FileDigests] = None,
) -> None:
    """Fills in ``programs`` for each task dict (see :class:`ProgramHasher`), one lookup per word."""
    hasher = ProgramHasher(base_dir, digests)
    for t in tasks:
        hasher.fill(t)
