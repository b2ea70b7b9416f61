"""What a warm Snakemake imports once on a worker: imported by the warm process (the ``preload``
of the executor's function tasks, :mod:`.warm`), never by a workflow.

Importing this module imports Snakemake's command line (``snakemake.cli``: the API, the
workflow, persistence, the scheduler, the plugin registries: about 0.55 s of CPU), builds its
argument parser once and drops it (the report, logger and scheduler registries, docutils,
jinja2, yaml: about 0.1 s; each job still builds its own, so its defaults read the job's
environment), and imports the library modules Snakemake's jobs import lazily (smart_open and
requests for the first Snakefile read, ``snakemake.benchmark``, ``snakemake.storage``, nbformat
and jsonschema for ``script:`` rules...: :data:`LAZY`, learned from forked jobs; about 0.1 s).
A job forked from that process then costs about 0.05 s of CPU instead of 0.9
(target/research/snakemake-warm.md).

Never preloaded, by design: the workflow's own modules (a job must see the current
``helper.py``), and scientific libraries (numpy, torch...: they size thread pools from the
environment at import, and a process with threads must not fork). Importing these modules
starts no thread and opens no file (measured); the warm process checks the first and logs a
warning otherwise.
"""

from __future__ import annotations

import importlib
from typing import List, Tuple

#: Modules Snakemake 9's jobs import after ``snakemake.cli`` and its parser: the research's
#: learned list (target/research/learned_modules.txt), by package. Each one is imported if it
#: can be; a missing one (another Snakemake version, nbformat not installed) is skipped.
LAZY: Tuple[str, ...] = (
    # the first Snakefile read: snakemake.sourcecache -> smart_open -> requests
    "smart_open", "smart_open.smart_open_lib", "smart_open.local_file", "smart_open.compression",
    "smart_open.http", "smart_open.s3", "smart_open.gcs", "smart_open.azure", "smart_open.hdfs",
    "smart_open.webhdfs", "smart_open.ftp", "smart_open.ssh", "smart_open.transport",
    "smart_open.bytebuffer", "smart_open.concurrency", "smart_open.constants",
    "smart_open.doctools", "smart_open.utils",
    "requests", "requests.adapters", "requests.api", "requests.auth", "requests.cookies",
    "requests.models", "requests.sessions", "requests.utils", "requests.packages",
    "urllib3", "urllib3.connectionpool", "urllib3.poolmanager", "urllib3.response",
    "urllib3.contrib", "urllib3.http2", "urllib3.http2.probe", "urllib3.util.ssltransport",
    "charset_normalizer", "idna", "idna.core", "idna.idnadata", "certifi", "encodings.idna",
    "stringprep", "http.cookiejar", "http.cookies", "ftplib",
    # running a job
    "snakemake.benchmark", "snakemake.storage", "getpass", "termios", "graphlib",
    "importlib.readers", "importlib.resources.readers",
    # script: rules (the notebook format, JSON schema checks)
    "attr", "attrs", "rpds", "referencing", "referencing.jsonschema", "jsonschema",
    "jsonschema.validators", "jsonschema._format", "jsonschema_specifications",
    "fastjsonschema", "traitlets", "traitlets.log", "nbformat", "nbformat.validator",
    "nbformat.reader", "nbformat.converter", "nbformat.v1", "nbformat.v2", "nbformat.v3",
    "nbformat.v4", "nbformat.v4.nbjson", "nbformat.corpus.words",
)

#: What could not be imported here (kept for the warm process's own record).
SKIPPED: List[str] = []


def _preload() -> None:
    import snakemake.cli

    # Built once, then dropped: the registries and the modules building it imports stay.
    snakemake.cli.get_argument_parser()
    for name in LAZY:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  (ImportError, or a module that fails here)
            SKIPPED.append(name)
    # The entry, so that a snapshot of this process's environment is taken now (.warm).
    importlib.import_module("snakemake_executor_plugin_diffuse.warm")


_preload()
