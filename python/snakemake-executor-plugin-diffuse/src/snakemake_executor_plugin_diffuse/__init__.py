"""Snakemake executor plugin ``diffuse``: each Snakemake job is a diffuse task.

The task runs what Snakemake gives every remote executor (``format_job_exec``: a Snakemake
process that runs the one job) in the workflow's working directory on a worker. By default it
is a function task (docs/warm.md): the job's ``python -m snakemake`` arguments run in a child
forked from a Snakemake the worker keeps imported (:mod:`.warm`), about 0.05 s of CPU before the
rule instead of 0.9; with ``--diffuse-warm false``, or when warm cannot give a new process's
result (a precommand, interpreter settings in ``--envvars``, a worker that cannot start a warm
Snakemake), it is the command itself, a new process.
Its resources become the task's fields (:func:`task_resources`). Its input files that the
``diffuse`` storage plugin serves (``--default-storage-provider diffuse``) are declared as the
task's inputs, so the dispatcher places it on a worker that already caches them and the worker
stages them before the job starts; the storage plugin then hard-links the staged copies where
the job reads them (``snakemake_storage_plugin_diffuse``). The files beside each input that
tools open without being told (index files: ``genome.fa.bwt``, ``genome.fa.fai``,
``A.bam.bai``, ``genome.dict``; :mod:`snakemake_storage_plugin_diffuse.siblings`) are declared
too, found in a listing of the input's directory read once per run. Without that storage
provider the job reads its inputs from the shared file system, as under Slurm, and none is
declared.

Status is read in one request per poll for the active jobs (``POST /v1/states`` with their
task ids, one request per 10,000).
Ready jobs are submitted in one request (``run_jobs``). Ctrl-C cancels the run's diffuse job.
Each job's stdout and stderr are copied by the worker to
``.snakemake/diffuse_logs/<rule>/<jobid>.{out,log}`` in the working directory; a failed job's
error names that log, diffuse's reason (exit code, ``timed out after N s``, an input not
found...) and the end of its stderr.
"""


import asyncio
import base64
import dataclasses
import json
import math
import os
import re
import shlex
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncGenerator, Dict, List, Mapping, Optional, Set, Tuple

from diffuse_client import Client, DiffuseError, Task
from diffuse_client.client import ENDED_STATES, TaskInfo
from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface
from snakemake_interface_executor_plugins.settings import (
    CommonSettings,
    ExecutorSettingsBase,
    SharedFSUsage,
)

from snakemake_storage_plugin_diffuse import ENV_INPUTS, ENV_INPUTS_FILE, ENV_STAGED
from snakemake_storage_plugin_diffuse.siblings import MAX_SIBLINGS, Listings, sibling_names

from . import warm as _warm

#: The longest input list passed in the task's environment; a longer one goes in a file.
MAX_ENV_INPUTS = 24 * 1024
#: The most argument bytes sent inline in a call (diffuse's limit is 256 KiB); more go as a blob.
MAX_INLINE_ARGS = 192 * 1024
#: Words of a shell command that end or join commands: a job command holding one in its
#: arguments is not a plain ``python -m snakemake ARGS`` and runs cold.
_SHELL_OPERATORS = {"&&", "||", ";", "|", "&", ">", "<", ">>", "2>", "2>&1"}


@dataclass
class ExecutorSettings(ExecutorSettingsBase):
    """``--diffuse-<name>`` on the command line, ``diffuse-<name>:`` in a profile.

    (This module does not use ``from __future__ import annotations``: Snakemake reads these
    fields' types at run time to build its command line.)"""

    url: Optional[str] = field(
        default=None,
        metadata={
            "help": "The dispatcher's URL (default $DIFFUSE_DISPATCHER, else http://127.0.0.1:8700).",
            "env_var": False,
            "required": False,
        },
    )
    token_file: Optional[str] = field(
        default=None,
        metadata={
            "help": "A file holding the client token (default $DIFFUSE_CLIENT_TOKEN).",
            "env_var": False,
            "required": False,
        },
    )
    job: Optional[str] = field(
        default=None,
        metadata={
            "help": "The diffuse job the tasks belong to (default snakemake-<run id>, one per run); "
            "Ctrl-C cancels it.",
            "env_var": False,
            "required": False,
        },
    )
    reuse: bool = field(
        default=False,
        metadata={
            "help": "Let diffuse reuse a kept result for an identical task (default no: Snakemake "
            "decides what runs; see docs/snakemake.md).",
            "env_var": False,
            "required": False,
        },
    )
    enforce_memory: bool = field(
        default=False,
        metadata={
            "help": "Make mem_mb a limit the worker enforces (a memory cgroup), as Slurm's "
            "--mem does; by default it is a request the dispatcher packs jobs by.",
            "env_var": False,
            "required": False,
        },
    )
    inputs_in_place: bool = field(
        default=False,
        metadata={
            "help": "Do not declare the jobs' input files as task inputs: the jobs read them from "
            "the shared file system, and the dispatcher does not place them by cache.",
            "env_var": False,
            "required": False,
        },
    )
    siblings_in_place: bool = field(
        default=False,
        metadata={
            "help": "Do not declare the files beside each input that share its name (index "
            "files: genome.fa.fai, genome.fa.bwt, A.bam.bai, genome.dict) as task inputs: the "
            "jobs read them on the shared file system (symbolic links beside the local copy).",
            "env_var": False,
            "required": False,
        },
    )
    max_cores: Optional[int] = field(
        default=None,
        metadata={
            "help": "The most cores a task asks for (default: the largest connected worker's); "
            "a job or group job with more threads runs with this many (its Snakemake gets "
            "--cores N), instead of waiting for a worker that large.",
            "env_var": False,
            "required": False,
        },
    )
    poll: float = field(
        default=0.5,
        metadata={
            "help": "Seconds between status checks (each one request for all active jobs), "
            "instead of Snakemake's --seconds-between-status-checks (10 s by default, for "
            "executors that query a batch scheduler per job).",
            "env_var": False,
            "required": False,
        },
    )
    priority: int = field(
        default=0,
        metadata={"help": "The tasks' diffuse priority.", "env_var": False, "required": False},
    )
    warm: Optional[bool] = field(
        default=True,
        metadata={
            "help": "Run each job in a child forked from a warm Snakemake that each worker "
            "keeps (a function task: about 0.05 s of CPU per job instead of 0.9; the workers' "
            "interpreter needs diffuse-client, Snakemake and these plugins, as for the cold "
            "path). false: each job is a new `python -m snakemake` process (see "
            "docs/snakemake.md).",
            "env_var": False,
            "required": False,
            "parse_func": lambda v: parse_bool(v),
            "unparse_func": lambda v: "true" if v else "false",
        },
    )


def parse_bool(value: Any) -> bool:
    """A setting's yes or no: true/false, yes/no, on/off, 1/0 (any case), or a bool."""
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("true", "yes", "on", "1"):
        return True
    if s in ("false", "no", "off", "0"):
        return False
    raise WorkflowError(f"diffuse: {value!r} is not true or false")


common_settings = CommonSettings(
    non_local_exec=True,
    implies_no_shared_fs=False,
    job_deploy_sources=False,
    pass_default_storage_provider_args=True,
    pass_default_resources_args=True,
    pass_envvar_declarations_to_cmd=True,
    auto_deploy_default_storage_provider=False,
    init_seconds_before_status_checks=0,
)


def task_resources(
    threads: int, resources: Mapping[str, Any], enforce_memory: bool = False
) -> Dict[str, Any]:
    """A job's threads and resources as diffuse task fields.

    ``threads`` -> ``cores``; ``mem_mb`` (or ``mem_mib``) -> ``memory`` in MB (MiB), a request
    unless ``enforce_memory``; ``runtime`` (minutes) -> ``timeout_s`` and ``walltime_s``;
    ``gpu`` (or ``gpus``) -> ``gpus``. Other resources are Snakemake's own (it counts them
    against ``--resources``) and are not sent.
    """
    out: Dict[str, Any] = {"cores": max(1, int(threads))}
    if resources.get("mem_mb") not in (None, ""):
        out["memory"] = f"{int(resources['mem_mb'])}MB"
    elif resources.get("mem_mib") not in (None, ""):
        out["memory"] = f"{int(resources['mem_mib'])}MiB"
    if "memory" in out and not enforce_memory:
        out["memory_limit"] = "none"
    runtime = resources.get("runtime")
    if isinstance(runtime, (int, float)) and runtime > 0:
        out["timeout_s"] = float(runtime) * 60.0
        out["walltime_s"] = float(runtime) * 60.0
    gpus = resources.get("gpu", resources.get("gpus"))
    if isinstance(gpus, (int, float)) and gpus > 0:
        out["gpus"] = int(math.ceil(gpus))
    return out


def _is_diffuse_storage(f: Any) -> bool:
    obj = getattr(f, "storage_object", None) if getattr(f, "is_storage", False) else None
    return obj is not None and type(obj).__module__.startswith("snakemake_storage_plugin_diffuse")


def declared_inputs(job: JobExecutorInterface) -> List[str]:
    """The absolute paths of the job's input files that the diffuse storage plugin serves and
    that exist as regular files now (an input another job of the same group will write does
    not, nor does a directory: the job copies those from the shared path)."""
    out: List[str] = []
    seen = set()
    for f in job.input:
        if not _is_diffuse_storage(f):
            continue
        p = os.path.abspath(str(f.storage_object.query))
        if p not in seen and os.path.isfile(p):
            seen.add(p)
            out.append(p)
    return out


def _shared_path(f: Any) -> str:
    """The absolute shared path of a job's file (the storage query of a diffuse storage file)."""
    return os.path.abspath(str(f.storage_object.query) if _is_diffuse_storage(f) else str(f))


def named_files(job: JobExecutorInterface) -> Set[str]:
    """The absolute shared paths of every file the job (each job of a group job) names: inputs,
    outputs, logs and benchmarks. None of them is declared or placed as a sibling."""
    inner = list(job.jobs) if job.is_group() else [job]
    out: Set[str] = set()
    for j in inner:
        for f in list(j.input) + list(j.products()):
            out.add(_shared_path(f))
    return out


def find_siblings(
    inputs: List[str], named: Set[str], listings: Listings
) -> Tuple[List[str], Dict[str, int], int]:
    """The siblings of ``inputs`` (absolute paths of files) to declare as task inputs: regular
    files, not named by the job, at most :data:`MAX_SIBLINGS` per input. Also the directories
    whose listing was current and every sibling of an input there was declared, with their
    modification times (the job trusts those and reads no directory), and how many inputs had
    too many siblings (none of those declared: the job links them from the shared path)."""
    out: List[str] = []
    seen = set(inputs)
    listed: Dict[str, int] = {}
    incomplete: Set[str] = set()
    over = 0
    for path in inputs:
        d, name = os.path.split(path)
        names, mtime = listings.get(d)
        if mtime is None:
            incomplete.add(d)
        else:
            listed[d] = mtime
        found = [
            p for p in (os.path.join(d, n) for n in sibling_names(names, name))
            if p not in named and p not in seen
        ]
        if len(found) > MAX_SIBLINGS:
            over += 1
            incomplete.add(d)
            continue
        for p in found:
            if os.path.isfile(p):
                seen.add(p)
                out.append(p)
    for d in incomplete:
        listed.pop(d, None)
    return out, listed, over


def snakemake_argv(exec_job: str, python: str) -> Optional[List[str]]:
    """The arguments after ``PYTHON -m snakemake`` in a job command that ``format_job_exec``
    made, as the shell would pass them to that process (the command may begin with
    ``export K=V ... &&``: the job's ``--envvars``, which the warm path passes in the task's
    environment). None when the command is anything else (a ``--precommand``, another prefix,
    a shell operator among the arguments) or holds ``$`` or a backquote, which a shell might
    expand: such a job runs cold, through the shell, as before."""
    try:
        words = shlex.split(exec_job)
    except ValueError:
        return None
    i = 0
    if words[:1] == ["export"]:
        if "&&" not in words:
            return None
        i = words.index("&&") + 1
        if not all("=" in w for w in words[1 : i - 1]):
            return None
    if words[i : i + 3] != [python, "-m", "snakemake"]:
        return None
    argv = words[i + 3 :]
    if any(w in _SHELL_OPERATORS for w in argv):
        return None
    tail = exec_job.split(" -m snakemake", 1)[-1]
    if "$" in tail or "`" in tail:
        return None
    return argv


def _is_warm_start_failure(info: TaskInfo) -> bool:
    """Whether a job's function task failed because the worker could not start its warm
    process (no such interpreter, diffuse_client or Snakemake missing there, an older
    diffuse_client, a setup that failed): the job never ran, and runs cold instead."""
    oc = info.outcome
    if info.state != "failed" or oc is None or oc.exit_code is not None or not oc.error:
        return False
    e = oc.error
    return (
        "diffuse_client.warm did not start" in e
        or "warm process's setup" in e
        or "warm process: exec" in e
        or "speaks protocol" in e
        or "warm process setup" in e
        or "said nothing for" in e
    )


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class Executor(RemoteExecutor):
    """Runs each Snakemake job (or group job) as one diffuse task."""

    def __post_init__(self) -> None:
        s = self.workflow.executor_settings
        assert s is None or isinstance(s, ExecutorSettings)
        self.settings: ExecutorSettings = s if s is not None else ExecutorSettings()
        if self.workflow.remote_execution_settings.immediate_submit:
            raise WorkflowError(
                "diffuse: --immediate-submit is not supported (the tasks would not wait for "
                "the jobs they depend on)"
            )
        try:
            self.client = Client(self.settings.url, token_file=self.settings.token_file)
            self.client.status()
        except (DiffuseError, OSError) as e:
            raise WorkflowError(f"diffuse: cannot reach the dispatcher: {e}") from e
        self.run_id = uuid.uuid4().hex[:10]
        self.own_job = self.settings.job is None
        self.diffuse_job = self.settings.job or f"snakemake-{self.run_id}"
        self.workdir = os.getcwd()
        self.log_dir = Path(self.workdir) / ".snakemake" / "diffuse_logs"
        # Tasks submitted and not yet seen to end: what Ctrl-C cancels. (Snakemake's own list
        # of active jobs is empty while its status thread holds them for a check.)
        self.unended: Set[str] = set()
        self._job_cores: Optional[int] = None
        # Listings of the inputs' directories, for their siblings: one per directory per run,
        # again only when it changed (within a share of the time: see Listings).
        self.listings = Listings()
        self._warned_siblings = False
        # Jobs run warm (function tasks) unless turned off, or until a worker cannot start
        # a warm Snakemake (then this run's jobs run cold: _warm_failed).
        self.warm = parse_bool(self.settings.warm if self.settings.warm is not None else True)
        self._function_uri: Optional[str] = None
        self._warm_checked = False
        self.max_cores = self.settings.max_cores or max(
            (int((w.get("slots") or [0])[0]) for w in self.client.workers()), default=0
        )
        self.next_seconds_between_status_checks = self.settings.poll
        self._poll = self.settings.poll
        self._waited = 0.0  # how long the last status check waited for a job to end
        # The jobs read cached copies only when they make their own local copies of storage
        # files (storage-local-copies not on the shared file system); otherwise the main
        # process makes them on the shared file system and the jobs read those.
        usage = self.workflow.storage_settings.shared_fs_usage
        self.cached_inputs = (
            not self.settings.inputs_in_place and SharedFSUsage.STORAGE_LOCAL_COPIES not in usage
        )
        self.logger.info(f"diffuse: dispatcher {self.client.url}, job {self.diffuse_job}")
        provider = getattr(self.workflow.storage_settings, "default_storage_provider", None)
        if provider != "diffuse":
            self.logger.info(
                "diffuse: jobs read their inputs on the shared file system and are not placed "
                "by cache (no --default-storage-provider diffuse; see docs/snakemake.md)"
            )
        elif not self.cached_inputs and not self.settings.inputs_in_place:
            self.logger.warning(
                "diffuse: --shared-fs-usage includes storage-local-copies: the main process "
                "copies inputs to the shared file system and jobs read those, not the caches"
            )

    # ------------------------------------------------------------------ submitting

    @property
    def cores(self) -> Any:
        """``--cores`` of the job's Snakemake: the cores its task holds (while its command is
        made), so that a group job runs its jobs within them."""
        if self._job_cores is not None:
            return self._job_cores
        return super().cores

    def _warm_usable(self) -> bool:
        """Whether jobs may run warm: the setting, and (checked once) no ``--precommand``
        (a shell command run before each job's Snakemake) and a dispatcher that keeps blobs
        (the function input)."""
        if not self.warm:
            return False
        if self._warm_checked:
            return True
        self._warm_checked = True
        precommand = self.workflow.spawned_job_args_factory.precommand(
            executor_common_settings=self.common_settings
        )
        if precommand:
            self.warm = False
            self.logger.info(
                "diffuse: jobs run cold (a new Snakemake process each): a precommand runs "
                "before each job"
            )
            return False
        try:
            self._function_uri = self.client.put_blob(_warm.FUNCTION)
        except DiffuseError as e:
            self.warm = False
            self.logger.warning(f"diffuse: jobs run cold: the dispatcher keeps no blobs ({e})")
            return False
        return True

    def _warm_call(self, argv: List[str]) -> Tuple[Dict[str, Any], List[str]]:
        """The ``call`` of a job run warm, and the inputs to add after the job's (the function
        input, and the arguments when too large to go inline)."""
        assert self._function_uri is not None
        data = _warm.encode_args(argv, staged=self.cached_inputs)
        extra = [self._function_uri]
        call: Dict[str, Any] = {
            "entry": _warm.ENTRY,
            "python": self.get_python_executable(),
            "preload": list(_warm.PRELOAD),
            "isolation": "fork",
        }
        if len(data) <= MAX_INLINE_ARGS:
            call["args"] = base64.b64encode(data).decode("ascii")
        else:
            extra.append(self.client.put_blob(data))
        return call, extra

    def task_for(self, job: JobExecutorInterface) -> Tuple[Task, Dict[str, Any]]:
        """The diffuse task that runs ``job``, and what the executor remembers of it: a
        function task (warm) when the job can run warm, else a command (cold); ``aux["cold"]``
        is the cold task of a warm job, run if its worker cannot start a warm Snakemake."""
        name = _UNSAFE.sub("_", str(job.name))
        task_id = f"smk-{self.run_id}-{job.jobid}-{name}-a{job.attempt}"
        env: Dict[str, str] = {}
        inputs = declared_inputs(job) if self.cached_inputs else []
        siblings: List[str] = []
        if inputs:
            named = named_files(job)
            listed: Dict[str, int] = {}
            if not self.settings.siblings_in_place:
                siblings, listed, over = find_siblings(inputs, named, self.listings)
                if over and not self._warned_siblings:
                    self._warned_siblings = True
                    self.logger.warning(
                        f"diffuse: an input of job {job.jobid} has more than {MAX_SIBLINGS} files "
                        "beside it that share its name: they are read on the shared file system"
                    )
            told = json.dumps({"inputs": inputs + siblings, "listed": listed, "named": sorted(named)})
            if len(told) <= MAX_ENV_INPUTS:
                env[ENV_INPUTS] = told
            else:
                path = Path(self.tmpdir) / f"{task_id}.inputs.json"
                path.write_text(told, encoding="utf-8")
                env[ENV_INPUTS_FILE] = str(path)
            inputs = inputs + siblings
        log_base = self.log_dir / name / str(job.jobid)
        log_base.parent.mkdir(parents=True, exist_ok=True)
        fields = task_resources(job.threads, job.resources, self.settings.enforce_memory)
        if self.max_cores and fields["cores"] > self.max_cores:
            # A group job asks for the threads of its jobs added up; no worker may be that large.
            fields["cores"] = self.max_cores
        staged = f'export {ENV_STAGED}="$(pwd)/inputs" && ' if self.cached_inputs else ""
        self._job_cores = fields["cores"]
        try:
            exec_job = self.format_job_exec(job)
        finally:
            self._job_cores = None
        cmd = f"{staged}cd {shlex.quote(self.workdir)} && {exec_job}"
        task = Task(
            id=task_id,
            cmd=cmd,
            inputs=inputs,
            env=env or None,
            job=self.diffuse_job,
            retries=0,  # Snakemake retries (--retries), with a new attempt number
            reuse=True if self.settings.reuse else False,
            stdout=log_base.with_suffix(".out").as_uri(),
            stderr=log_base.with_suffix(".log").as_uri(),
            priority=self.settings.priority or None,
            **fields,
        )
        aux: Dict[str, Any] = {
            "log": str(log_base.with_suffix(".log")), "inputs": len(inputs), "siblings": len(siblings),
        }
        argv = snakemake_argv(exec_job, self.get_python_executable()) if self._warm_usable() else None
        if argv is not None:
            call, extra = self._warm_call(argv)
            call["fn"] = len(inputs)
            if len(extra) > 1:
                call["args_input"] = len(inputs) + 1
            warm_env = dict(env)
            warm_env.update(self.envvars())  # the cold command's `export K=V &&`
            aux["cold"] = dataclasses.replace(task, id=f"smk-{self.run_id}-{job.jobid}-{name}-cold-a{job.attempt}")
            task = dataclasses.replace(
                task, cmd=None, call=call, inputs=inputs + extra, env=warm_env or None, cwd=self.workdir,
            )
        return task, aux

    def run_jobs(self, jobs: List[JobExecutorInterface]) -> None:
        """Submits every ready job in one request (one batch), then reports each."""
        if not jobs:
            return
        made: List[Tuple[JobExecutorInterface, Task, Dict[str, Any]]] = []
        for job in jobs:
            self.run_job_pre(job)
            task, aux = self.task_for(job)
            made.append((job, task, aux))
        try:
            self.client.submit_many([t for _, t, _ in made], base_dir=self.workdir)
        except DiffuseError as e:
            raise WorkflowError(f"diffuse: submitting {len(made)} job(s) failed: {e}") from e
        self.unended.update(t.id for _, t, _ in made)
        for job, task, aux in made:
            self.report_job_submission(SubmittedJobInfo(job, external_jobid=task.id, aux=aux))

    def run_job(self, job: JobExecutorInterface) -> None:
        """One job (Snakemake calls ``run_jobs``; this is for callers that do not)."""
        self.run_jobs([job])

    # ------------------------------------------------------------------ status

    async def sleep(self) -> None:
        """The pause between status checks: what is left of ``--diffuse-poll`` after the last
        check, which waited at the dispatcher until one of the jobs ended (a long poll): none
        after a check that saw a job end or waited the whole time, so a job's end is heard of
        at once. (RemoteExecutor's pause reads ``next_seconds_between_status_checks``, which
        its status thread may read before ``__post_init__`` has set it: the first pause was
        then Snakemake's default, 10 s, and a run of short jobs waited that long, measured.)"""
        rest = getattr(self, "_poll", 0.5) - getattr(self, "_waited", 0.0)
        self._waited = 0.0
        if rest > 0:
            await asyncio.sleep(rest)

    async def check_active_jobs(
        self, active_jobs: List[SubmittedJobInfo]
    ) -> AsyncGenerator[SubmittedJobInfo, None]:
        if not active_jobs:
            return
        async with self.status_rate_limiter:
            try:
                # One request per 10,000 jobs, whatever else the dispatcher holds; answered
                # once one of them has ended, or after --diffuse-poll seconds.
                t0 = time.monotonic()
                states, unknown_ids = self.client.states(
                    [str(j.external_jobid) for j in active_jobs], wait_s=self._poll
                )
                unknown = set(unknown_ids)
                ended = bool(unknown) or any(t.state in ENDED_STATES for t in states.values())
                self._waited = self._poll if ended else time.monotonic() - t0
            except DiffuseError as e:
                self.logger.warning(f"diffuse: status check failed ({e}); trying again")
                for j in active_jobs:
                    yield j
                return
        for j in active_jobs:
            if str(j.external_jobid) in unknown:
                self.unended.discard(str(j.external_jobid))
                msg = f"diffuse task {j.external_jobid} is not known to the dispatcher at {self.client.url}"
                self.report_job_error(j, msg=msg)
                continue
            info = states.get(str(j.external_jobid))
            if info is None or info.state not in ENDED_STATES:
                yield j
                continue
            self.unended.discard(info.id)
            cold = (j.aux or {}).get("cold")
            if cold is not None and _is_warm_start_failure(info):
                resubmitted = self._run_cold_instead(j, info, cold)
                if resubmitted is not None:
                    yield resubmitted
                    continue
            if info.state == "succeeded":
                self.report_job_success(j)
            else:
                self.report_job_error(j, msg=self.failure_message(j, info), aux_logs=[(j.aux or {}).get("log")])

    def _run_cold_instead(
        self, j: SubmittedJobInfo, info: TaskInfo, cold: Task
    ) -> Optional[SubmittedJobInfo]:
        """A worker could not start a warm Snakemake for this job: run it cold, and every later
        job of this run too (the workers' environments are alike). The job's new submission, or
        None if it cannot be submitted (the job then fails with the warm task's reason)."""
        oc = info.outcome
        reason = (oc.error if oc is not None else None) or "no reason given"
        if self.warm:
            self.warm = False
            self.logger.warning(
                f"diffuse: a worker could not start a warm Snakemake ({reason.strip()}); this "
                "run's jobs run cold from now on (a new Snakemake process each; "
                "--diffuse-warm false says so from the start)"
            )
        try:
            self.client.submit_many([cold], base_dir=self.workdir)
        except DiffuseError as e:
            self.logger.warning(f"diffuse: submitting job {j.job.jobid} cold failed: {e}")
            return None
        self.unended.add(cold.id)
        aux = dict(j.aux or {})
        aux.pop("cold", None)
        return SubmittedJobInfo(j.job, external_jobid=cold.id, aux=aux)

    def failure_message(self, j: SubmittedJobInfo, info: TaskInfo) -> str:
        """diffuse's reason for a failed or cancelled task, and the end of its stderr."""
        oc = info.outcome
        parts = [f"diffuse task {info.id} {info.state}"]
        if oc is not None:
            if oc.node:
                parts.append(f"on {oc.node}")
            if oc.exit_code is not None:
                parts.append(f"exit code {oc.exit_code}")
            if oc.error:
                parts.append(oc.error)
        msg = ", ".join(parts) + f"; log: {(j.aux or {}).get('log')}\n"
        tail = oc.stderr_tail if oc is not None else ""
        if tail:
            lines = tail.rstrip().splitlines()[-20:]
            msg += "end of its stderr:\n" + "\n".join(lines) + "\n"
        return msg

    # ------------------------------------------------------------------ cancelling

    def cancel_jobs(self, active_jobs: List[SubmittedJobInfo]) -> None:
        """Ctrl-C: cancels the run's diffuse job (one request), or each task not yet seen to
        end if the job name was given (it may hold other runs' tasks). ``active_jobs`` is not
        enough: it is empty while Snakemake's status thread holds the jobs for a check."""
        unended = self.unended | {str(j.external_jobid) for j in active_jobs}
        if not unended:
            return
        try:
            if self.own_job:
                self.client.cancel_job(self.diffuse_job)
                return
            for task_id in sorted(unended):
                try:
                    self.client.cancel(task_id)
                except DiffuseError:
                    pass  # already ended
        except DiffuseError as e:
            self.logger.warning(f"diffuse: cancelling failed: {e}")
