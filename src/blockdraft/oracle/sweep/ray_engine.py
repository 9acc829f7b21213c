"""A sweep's tasks as Ray core tasks (the ``ray`` engine of :mod:`blockdraft.oracle.sweep
.engines`; Ray is the ``blockdraft[ray]`` extra, imported here only).

Core tasks rather than Ray Tune: a sweep is a fixed grid of independent, deterministic
simulations whose results are cached by key; it needs scheduling, retries and results back,
not a search algorithm, trials, schedulers or Tune's experiment folders.

Each task asks one CPU. Ray runs a task again when its worker process dies (``max_retries``:
the engine's ``retries``), so a death costs that task alone; an exception the task raised is
not retried (it would raise again) and stops the sweep with its message. Without an address
the sweep starts a local Ray of ``workers`` CPUs and shuts it down at the end, unless this
process is already connected to a Ray, which it then uses and leaves running. The trace and
the LMs are read by path on the workers: on a cluster of several machines they must be at the
same paths on each (a shared file system), and each worker checks their digests.

Public surface:
    run_ray(engine, tasks, on_outcome)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from blockdraft.core.extras import import_optional
from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.sweep.tasks import ShardOutcome, Task, run_task_in_worker


def _worker_env() -> dict[str, Any]:
    """The runtime environment of a local Ray's workers: this process's ``PYTHONPATH`` made
    absolute (a relative entry would resolve against the worker's folder), so they import the
    same blockdraft as the driver."""
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not entries:
        return {}
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(str(Path(p).resolve())
                                                       for p in entries)}}


def _reachable(address: str, timeout: float = 10.0) -> None:
    """A ``HOST:PORT`` (or ``ray://HOST:PORT``) address that no server answers is refused at
    once (Ray itself would retry for minutes); ``auto`` and other forms are left to Ray.

    Raises:
        OracleError: nothing listens there.
    """
    import socket

    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise OracleError(f"--ray {address}: no Ray cluster answers there ({e}); start one "
                          "(ray start --head) or give its address") from e


def run_ray(engine: Any, tasks: Sequence[Task], on_outcome: Callable[[ShardOutcome], None]
            ) -> None:
    """Run ``tasks`` as Ray tasks (see the module docstring).

    Raises:
        OracleError: Ray is not installed, the cluster cannot be reached, a task raised, or a
            task's worker died more than ``engine.retries`` times.
    """
    ray = import_optional("ray", "ray", "--ray (sweeps on a Ray cluster)", OracleError)
    started = False
    if not ray.is_initialized():
        if engine.address:
            _reachable(engine.address)
        try:
            if engine.address:
                ray.init(address=engine.address, log_to_driver=False)
            else:
                ray.init(num_cpus=engine.workers, include_dashboard=False, log_to_driver=False,
                         runtime_env=_worker_env() or None)
        except ConnectionError as e:  # Ray's text names its own flags, not the sweep's
            if not engine.address:
                raise OracleError(f"cannot start a local Ray: {' '.join(str(e).split())}") from e
            raise OracleError(
                f"--ray {engine.address}: no running Ray cluster was found there; start one "
                "(ray start --head) and give its address (--ray HOST:PORT, or --ray auto on "
                "one of its machines), or run --ray alone for a local Ray of --workers CPUs"
            ) from e
        except (RuntimeError, ValueError) as e:
            where = f"--ray {engine.address}" if engine.address else "a local Ray"
            raise OracleError(f"cannot start or join {where}: {' '.join(str(e).split())}") from e
        started = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=engine.retries,
                            retry_exceptions=False)(run_task_in_worker)
        refs = {remote.remote(task): task for task in tasks}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                task = refs[ref]
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    cause = e.as_instanceof_cause()
                    if isinstance(cause, OracleError):
                        raise OracleError(str(cause).split("\n")[-1] or str(cause)) from e
                    raise OracleError(f"{task.setting.label!r} failed on a Ray worker: "
                                      f"{' '.join(str(e).split())[-500:]}") from e
                except (ray.exceptions.WorkerCrashedError,
                        ray.exceptions.NodeDiedError) as e:
                    raise OracleError(
                        f"the Ray worker running {task.setting.label!r} died {engine.retries + 1}"
                        f" times (retries: {engine.retries}): look for a crash in that "
                        "configuration (memory, a native library)") from e
                on_outcome(outcome)
        del refs
    except BaseException:
        for ref in pending if "pending" in locals() else ():
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
