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

``store_object`` copies a job's output from its local copy to the shared path (a temporary
name, then a rename), ``remove`` deletes it there, ``touch`` sets its modification time.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional
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

#: Set by the executor's task command: the task's ``inputs`` directory on the worker.
ENV_STAGED = "SNAKEMAKE_DIFFUSE_STAGED"
#: Set by the executor: a JSON list, input ``i`` of the task is the absolute path at index ``i``.
ENV_INPUTS = "SNAKEMAKE_DIFFUSE_INPUTS"
#: Instead of ``ENV_INPUTS`` when the list is long: a JSON file holding it.
ENV_INPUTS_FILE = "SNAKEMAKE_DIFFUSE_INPUTS_FILE"
#: Where the local copies go inside a task, beside ``inputs/``.
TASK_STORAGE_DIR = "snakemake-storage"


def staged_inputs(environ: Optional[Dict[str, str]] = None) -> Dict[str, Path]:
    """The worker's staged copy of each input the executor declared: absolute shared path ->
    ``<task dir>/inputs/<i>/<base name>``. Empty outside a diffuse task."""
    env = os.environ if environ is None else environ
    staged = env.get(ENV_STAGED)
    if not staged:
        return {}
    raw = env.get(ENV_INPUTS)
    if raw is None and env.get(ENV_INPUTS_FILE):
        with open(env[ENV_INPUTS_FILE], encoding="utf-8") as f:
            raw = f.read()
    paths: List[str] = json.loads(raw) if raw else []
    return {
        os.path.abspath(p): Path(staged) / str(i) / os.path.basename(p)
        for i, p in enumerate(paths)
    }


class StorageProviderSettings(StorageProviderSettingsBase):
    """The plugin has no settings."""


class StorageProvider(StorageProviderBase):
    """Paths on the shared file system; inside a diffuse task, local copies in its scratch
    directory, hard-linked from the worker's staged inputs."""

    def __post_init__(self) -> None:
        self.staged = staged_inputs()
        staged_dir = os.environ.get(ENV_STAGED)
        if staged_dir:
            # In a task: keep the local copies in its scratch directory (removed when the task
            # ends), on the cache's file system, whatever --local-storage-prefix said.
            prefix = Path(staged_dir).parent / TASK_STORAGE_DIR
            prefix.mkdir(parents=True, exist_ok=True)
            self.local_prefix = prefix
        self.linked = 0
        self.copied = 0

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
        pass

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
        staged = self._provider.staged.get(os.path.abspath(self.path))
        if staged is not None and staged.is_file():
            try:
                os.link(staged, local)
                self._provider.linked += 1
                return
            except OSError:
                pass  # another file system: copy the staged file (still not shared storage)
            shutil.copyfile(staged, local)
            self._provider.copied += 1
            return
        if self.path.is_dir():
            shutil.copytree(self.path, local, symlinks=False, dirs_exist_ok=True)
        else:
            shutil.copy2(self.path, local)

    def store_object(self) -> None:
        local = self.local_path()
        if os.path.lexists(self.path) or self.path.is_dir():
            self.remove()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if local.is_dir():
            shutil.copytree(local, self.path, symlinks=True)
            return
        tmp = self.path.parent / f".{self.path.name}.diffuse-{uuid.uuid4().hex[:8]}"
        try:
            shutil.copy2(local, tmp, follow_symlinks=True)
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
