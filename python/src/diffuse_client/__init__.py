"""Python client for diffuse, a data-aware many-task execution engine.

- :class:`Client`: the dispatcher's HTTP API (submit, get, wait, cancel, locate, status, logs,
  kept results).
- :class:`DiffuseExecutor`: a ``concurrent.futures.Executor`` that runs commands as tasks.
- :class:`FunctionExecutor`: a ``concurrent.futures.Executor`` that runs Python functions as
  function tasks, in warm processes on the workers (:class:`Input`: a file argument declared as
  an input).
- ``diffuse_client.parsl.DiffuseParslExecutor``: a Parsl executor (needs ``parsl``).
"""

from .client import (
    ENDED_STATES,
    STATES,
    Attempt,
    BatchInfo,
    Client,
    JobCancelled,
    JobInfo,
    Location,
    Outcome,
    PartialSubmitError,
    ResultsInfo,
    Status,
    Submitted,
    Task,
    TaskInfo,
    Traffic,
    WaitTimeout,
    to_uri,
)
from .errors import DiffuseAPIError, DiffuseConnectionError, DiffuseError
from .executor import DiffuseExecutor, TaskExecutorBase, TaskFuture, call_value
from .functions import CallFuture, FunctionExecutor, Input
from .programs import ProgramHasher, fill_programs
from .result import TaskFailed, TaskResult

__version__ = "0.1.0"

__all__ = [
    "ENDED_STATES",
    "STATES",
    "Attempt",
    "BatchInfo",
    "CallFuture",
    "Client",
    "DiffuseAPIError",
    "DiffuseConnectionError",
    "DiffuseError",
    "DiffuseExecutor",
    "FunctionExecutor",
    "Input",
    "JobCancelled",
    "JobInfo",
    "Location",
    "Outcome",
    "PartialSubmitError",
    "ProgramHasher",
    "ResultsInfo",
    "Status",
    "Submitted",
    "Task",
    "TaskExecutorBase",
    "TaskFailed",
    "TaskFuture",
    "TaskInfo",
    "TaskResult",
    "Traffic",
    "WaitTimeout",
    "call_value",
    "fill_programs",
    "to_uri",
]
