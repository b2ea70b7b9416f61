"""Snakemake storage plugin ``diffuse``: files on the shared file system, read from the
diffuse worker's cache inside a diffuse task.

A query is a path (relative to the working directory, or absolute) on the file system that the
Snakemake main process and the diffuse workers share. ``exists``, ``mtime`` and ``size`` look
at that path, so Snakemake's rerun triggers see the shared file as they would without the
plugin. What differs is ``retrieve_object``, which makes the local copy a job reads:

- inside a task of the diffuse executor (``snakemake_executor_plugin_diffuse``) the executor
  declared the job's input files as the task's inputs, so the worker has already staged each
  one (from its own cache, a peer's, or shared storage once) as ``inputs/<i>/<base name>`` in
  the task's scratch directory. The executor tells the job where (``SNAKEMAKE_DIFFUSE_STAGED``)
  and which path is input ``i`` (``SNAKEMAKE_DIFFUSE_INPUTS``). The local copy is a hard link
  of that staged file: no byte is read from shared storage, none is copied. The local copies
  themselves are put in the task's scratch directory (beside ``inputs/``, on the file system
  of the worker's cache, so that the link can be made), not under the shared working
  directory;
- anywhere else (a ``localrule`` in the main process, a file the worker did not stage, such as
  one an earlier job of the same group wrote) it is copied from the shared path.

Beside each local copy of a file go its *siblings*, the files tools open beside their input
without being told (``genome.fa.bwt``, ``genome.fa.fai``, ``A.bam.bai``, ``genome.dict``: the
rule is in :mod:`.siblings`). The executor declares them as task inputs too, so they are
cached and staged like the input, and the local copy's sibling is a hard link of the staged
one. A sibling the worker did not stage (the directory changed after the executor listed it,
too many siblings, ``--diffuse-siblings-in-place``, outside a task) is a symbolic link to the
shared path: read in place, as on the shared file system. A file the job itself names (an
input, whose local copy Snakemake makes, or an output, log or benchmark, which the job writes)
is never put there as a sibling.

``store_object`` copies a job's output from its local copy to the shared path (a temporary
name, then a rename), ``remove`` deletes it there, ``touch`` sets its modification time.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Set
from urllib.parse import urlparse

from snakemake_interface_common.utils import lutime
from snakemake_interface_storage_plugins.io import IOCacheStorageInterface, Mtime, get_constant_prefix
from snakemake_interface_storage_plugins.settings import StorageProviderSettingsBase
from snakemake_interface_storage_plugins.storage_object import (
    StorageObjectGlob,
    StorageObjectRead,
    StorageObjectTouch,
    StorageObjectWrite,
)
from snakemake_interface_storage_plugins.storage_provider import (
    ExampleQuery,
    Operation,
    QueryType,
    StorageProviderBase,
    StorageQueryValidationResult,
)

from .siblings import STEM_SUFFIXES, Listings, is_sibling, sibling_names

#: Set by the executor's task command: the task's ``inputs`` directory on the worker.
ENV_STAGED = "SNAKEMAKE_DIFFUSE_STAGED"
#: Set by the executor: a JSON object. ``inputs``: input ``i`` of the task is the absolute path
#: at index ``i`` (the job's input files, then their siblings); ``listed``: the directories whose
#: siblings are all among the inputs, with their modification time (ns) when the executor listed
#: them; ``named``: the absolute paths of every file the job names (inputs, outputs, logs,
#: benchmarks), never put beside a local copy as a sibling. (A JSON list is ``inputs`` alone.)
ENV_INPUTS = "SNAKEMAKE_DIFFUSE_INPUTS"
#: Instead of ``ENV_INPUTS`` when the list is long: a JSON file holding it.
ENV_INPUTS_FILE = "SNAKEMAKE_DIFFUSE_INPUTS_FILE"
#: Where the local copies go inside a task, beside ``inputs/``.
TASK_STORAGE_DIR = "snakemake-storage"


@dataclass
class TaskInputs:
    """What the executor told the job about its task's inputs (:data:`ENV_INPUTS`)."""

    #: absolute shared path -> ``<task dir>/inputs/<i>/<base name>``
    staged: Dict[str, Path] = field(default_factory=dict)
    #: directory -> modification time (ns) of the executor's complete listing of its siblings
    listed: Dict[str, int] = field(default_factory=dict)
    #: the files the job names: never placed as siblings
    named: Set[str] = field(default_factory=set)


def task_inputs(environ: Optional[Dict[str, str]] = None) -> TaskInputs:
    """The task's inputs as the executor declared them; empty outside a diffuse task."""
    env = os.environ if environ is None else environ
    staged = env.get(ENV_STAGED)
    if not staged:
        return TaskInputs()
    raw = env.get(ENV_INPUTS)
    if raw is None and env.get(ENV_INPUTS_FILE):
        with open(env[ENV_INPUTS_FILE], encoding="utf-8") as f:
            raw = f.read()
    told: Any = json.loads(raw) if raw else []
    if isinstance(told, list):
        told = {"inputs": told}
    paths: List[str] = told.get("inputs") or []
    return TaskInputs(
        staged={
            os.path.abspath(p): Path(staged) / str(i) / os.path.basename(p)
            for i, p in enumerate(paths)
        },
        listed={str(d): int(m) for d, m in (told.get("listed") or {}).items()},
        named={os.path.abspath(p) for p in told.get("named") or []},
    )


def staged_inputs(environ: Optional[Dict[str, str]] = None) -> Dict[str, Path]:
    """The worker's staged copy of each input the executor declared: absolute shared path ->
    ``<task dir>/inputs/<i>/<base name>``. Empty outside a diffuse task."""
    return task_inputs(environ).staged


class StorageProviderSettings(StorageProviderSettingsBase):
    """The plugin has no settings."""


class StorageProvider(StorageProviderBase):
    """Paths on the shared file system; inside a diffuse task, local copies in its scratch
    directory, hard-linked from the worker's staged inputs."""

    def __post_init__(self) -> None:
        self.task = task_inputs()
        self.staged = self.task.staged
        # The staged files' names by directory, sorted (for sibling_names).
        self._staged_by_dir: Dict[str, List[str]] = {}
        for p in sorted(self.staged):
            d, name = os.path.split(p)
            self._staged_by_dir.setdefault(d, []).append(name)
        for names in self._staged_by_dir.values():
            names.sort()
        # Directories read here (in a job, or in the main process), again when changed.
        self._listings = Listings(budget=float("inf"), settle_s=float("-inf"))
        staged_dir = os.environ.get(ENV_STAGED)
        if staged_dir:
            # In a task: keep the local copies in its scratch directory (removed when the task
            # ends), on the cache's file system, whatever --local-storage-prefix said.
            prefix = Path(staged_dir).parent / TASK_STORAGE_DIR
            prefix.mkdir(parents=True, exist_ok=True)
            self.local_prefix = prefix
        self.linked = 0
        self.copied = 0
        #: siblings placed as hard links of staged copies, and as symbolic links to shared paths
        self.siblings_linked = 0
        self.siblings_in_place = 0

    def siblings_of(self, path: str) -> List[str]:
        """The absolute shared paths of the siblings of the file ``path`` (absolute) that a job
        may need beside its local copy. Inside a task whose executor listed the directory, and
        the directory has not changed since: the staged ones (the executor staged them all).
        Otherwise the directory is read (once per job) and every sibling there is a candidate."""
        d, name = os.path.split(path)
        listed = self.task.listed.get(d)
        if listed is not None:
            try:
                current = os.stat(d).st_mtime_ns == listed
            except OSError:
                current = False
            if current:
                return [os.path.join(d, n) for n in sibling_names(self._staged_by_dir.get(d, []), name)]
        names, _ = self._listings.get(d)
        return [p for p in (os.path.join(d, n) for n in sibling_names(names, name)) if os.path.isfile(p)]

    @classmethod
    def example_queries(cls) -> List[ExampleQuery]:
        return [
            ExampleQuery(
                query="data/sample1.fq",
                type=QueryType.ANY,
                description="A file or directory on the file system the workers share.",
            )
        ]

    def rate_limiter_key(self, query: str, operation: Operation) -> Any:
        return None

    def default_max_requests_per_second(self) -> float:
        return 1000.0

    def use_rate_limiter(self) -> bool:
        return False

    @classmethod
    def is_valid_query(cls, query: str) -> StorageQueryValidationResult:
        if urlparse(query).scheme:
            return StorageQueryValidationResult(
                query=query, valid=False, reason="a URL: the diffuse storage takes paths"
            )
        if not query:
            return StorageQueryValidationResult(query=query, valid=False, reason="empty path")
        return StorageQueryValidationResult(query=query, valid=True)

    def list_objects(self, query: Any) -> Iterable[str]:
        p = Path(query)
        if p.is_dir():
            return (str(x) for x in p.rglob("*"))
        return (str(p),) if p.exists() else ()


class StorageObject(StorageObjectRead, StorageObjectWrite, StorageObjectGlob, StorageObjectTouch):
    """A path on the shared file system (``query``), and its local copy (``local_path()``)."""

    def __post_init__(self) -> None:
        self.path = Path(self.query)
        #: the siblings put beside the local copy (removed by :meth:`cleanup`)
        self.placed: List[Path] = []

    @property
    def _provider(self) -> StorageProvider:
        p = self.provider
        assert isinstance(p, StorageProvider)
        return p

    async def inventory(self, cache: IOCacheStorageInterface) -> None:
        key = self.cache_key()
        if key in cache.exists_in_storage:
            return
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            cache.exists_in_storage[key] = False
            return
        cache.mtime[key] = Mtime(storage=self._mtime_of(st.st_mtime))
        cache.size[key] = st.st_size
        cache.exists_in_storage[key] = True

    def get_inventory_parent(self) -> Optional[str]:
        parent = self.path.parent
        return None if parent == Path(".") else str(parent)

    def local_suffix(self) -> str:
        q = os.path.normpath(str(self.query))
        if q.startswith("/"):
            return "__abspath__/" + q.lstrip("/")
        return q

    def cleanup(self) -> None:
        for p in self.placed:
            if os.path.lexists(p):
                os.unlink(p)
        self.placed = []

    def exists(self) -> bool:
        return os.path.lexists(self.path)

    def mtime(self) -> float:
        return self._mtime_of(os.stat(self.path, follow_symlinks=False).st_mtime)

    def size(self) -> int:
        return os.stat(self.path).st_size

    def local_footprint(self) -> int:
        if self.path.is_dir():
            return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())
        return self.size()

    def retrieve_object(self) -> None:
        local = self.local_path()
        local.parent.mkdir(parents=True, exist_ok=True)
        provider = self._provider
        staged = provider.staged.get(os.path.abspath(self.path))
        if staged is not None and staged.is_file():
            if _link_or_copy(staged, local):
                provider.linked += 1
            else:
                provider.copied += 1
        elif self.path.is_dir():
            shutil.copytree(self.path, local, symlinks=False, dirs_exist_ok=True)
            return
        else:
            shutil.copy2(self.path, local)
        self._place_siblings(local)
        self._keep_indexes_newer(local)

    def _place_siblings(self, local: Path) -> None:
        """Puts the input's siblings beside its local copy: a hard link of the staged copy, or
        a symbolic link to the shared path. Never over a file already there, never a file the
        job names (Snakemake makes those local copies, or the job writes them)."""
        provider = self._provider
        for sib in provider.siblings_of(os.path.abspath(self.path)):
            if sib in provider.task.named:
                continue
            dst = local.parent / os.path.basename(sib)
            if os.path.lexists(dst):
                continue
            staged = provider.staged.get(sib)
            if staged is not None and staged.is_file():
                _link_or_copy(staged, dst)
                provider.siblings_linked += 1
            else:
                os.symlink(sib, dst)
                provider.siblings_in_place += 1
            self.placed.append(dst)

    def _keep_indexes_newer(self, local: Path) -> None:
        """An index newer than its data on the shared file system stays newer beside the local
        copies. The worker's cached copies carry the time they were fetched, not the shared
        file's, so a .bai fetched before its .bam looks older than it: htslib then warns, and
        GATK 4 refuses an index older than its file. Checked for the pairs (data, index) that
        ``local`` forms with the local copies beside it, in either role."""
        d, name = local.parent, local.name
        for sib in self._provider.siblings_of(os.path.abspath(self.path)):
            _index_not_older(d / name, d / os.path.basename(sib), Path(self.path), Path(sib))
        for data in _data_files_of(d, name):
            _index_not_older(d / data, local, Path(self.path).parent / data, Path(self.path))

    def store_object(self) -> None:
        local = self.local_path()
        if local.is_dir():
            if os.path.lexists(self.path) or self.path.is_dir():
                self.remove()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(local, self.path, symlinks=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.parent / f".{self.path.name}.diffuse-{uuid.uuid4().hex[:8]}"
        try:
            # Copied before the shared file is replaced: the local copy may be a symbolic link
            # to it (a sibling placed outside a task, which the rule then wrote through).
            shutil.copy2(local, tmp, follow_symlinks=True)
            if self.path.is_dir() and not self.path.is_symlink():
                shutil.rmtree(self.path)
            os.replace(tmp, self.path)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)

    def remove(self) -> None:
        if self.path.is_dir() and not self.path.is_symlink():
            shutil.rmtree(self.path)
        elif os.path.lexists(self.path):
            self.path.unlink()

    def list_candidate_matches(self) -> Iterable[str]:
        prefix = Path(get_constant_prefix(self.query))
        if prefix.is_dir():
            return (str(x) for x in prefix.rglob("*"))
        return (str(prefix),)

    def touch(self) -> None:
        if self.path.is_dir():
            stamp = self.path / ".snakemake_timestamp"
            stamp.touch()
            lutime(str(stamp), None)
        elif os.path.lexists(self.path):
            lutime(str(self.path), None)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()

    def _mtime_of(self, st_mtime: float) -> float:
        if self.path.is_dir():
            stamp = self.path / ".snakemake_timestamp"
            if stamp.exists():
                return os.stat(stamp, follow_symlinks=False).st_mtime
        return st_mtime


def _link_or_copy(staged: Path, local: Path) -> bool:
    """Makes ``local`` a hard link of the worker's staged copy (True), or, on another file
    system, a copy of it with its times (False: still not shared storage). A file already at
    ``local`` is replaced unless it is that same file."""
    if os.path.lexists(local):
        if os.path.exists(local) and os.path.samefile(staged, local):
            return True
        os.unlink(local)
    try:
        os.link(staged, local)
        return True
    except OSError:
        pass
    shutil.copy2(staged, local)
    return False


#: The largest index copied to keep it newer than its data (index files are small: a .bai is
#: about a thousandth of its BAM); a larger one is left as it is (a hard link).
MAX_INDEX_COPY = 256 * 1024 * 1024


def _data_files_of(d: Path, name: str) -> List[str]:
    """The files in ``d`` (the local copies) of which ``name`` is a sibling: ``A.bam`` and
    ``A`` for ``A.bam.bai``, ``A.bam`` for ``A.bai``."""
    out = [name[:i] for i in range(1, len(name)) if name[i] == "." and (d / name[:i]).is_file()]
    if any(name.endswith("." + suffix) for suffix in STEM_SUFFIXES):
        try:
            here = os.listdir(d)
        except OSError:
            here = []
        out += [n for n in here if n not in out and n != name and (d / n).is_file() and is_sibling(name, n)]
    return out


def _index_not_older(data: Path, index: Path, shared_data: Path, shared_index: Path) -> None:
    """If the local ``index`` is older than the local ``data`` while the shared index is not
    older than the shared data, replaces the local index by a copy of it one second newer than
    the local data (a copy: the hard link's inode is the worker's cached copy, whose time the
    cache checks)."""
    try:
        li, ld = os.stat(index), os.stat(data)
        if li.st_mtime_ns >= ld.st_mtime_ns or li.st_size > MAX_INDEX_COPY:
            return
        if os.stat(shared_index).st_mtime_ns < os.stat(shared_data).st_mtime_ns:
            return  # older there too: as on the shared file system
    except OSError:
        return
    tmp = index.parent / f".{index.name}.diffuse-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copyfile(index, tmp)
        t = ld.st_mtime_ns + 1_000_000_000
        os.utime(tmp, ns=(t, t))
        os.replace(tmp, index)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
