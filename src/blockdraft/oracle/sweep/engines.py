"""Where a sweep's tasks run: in this process, in local worker processes, or on a Ray cluster
(:mod:`blockdraft.oracle.sweep.ray_engine`). Every engine runs the same
:func:`~blockdraft.oracle.sweep.tasks.run_task` on the same tasks, so their results are equal
bit for bit; only the wall time differs. What a task shows (a warning, KenLM's loading lines)
is shown once, in the sweep's process, as the serial run shows it, whichever engine ran it
(:func:`~blockdraft.oracle.sweep.tasks.run_task_in_worker`).

- ``serial``: one task after the other, here.
- ``processes``: a :class:`concurrent.futures.ProcessPoolExecutor` of ``workers`` spawned
  processes (a fresh interpreter each: nothing of this process's threads or state is forked).
  At most ``2 x workers`` tasks are in flight. A worker that dies breaks Python's pool: the
  tasks then in flight are submitted again to a new pool, each at most ``retries`` more times;
  finished tasks are kept.
- ``ray``: Ray core tasks (one CPU each) on a local Ray started for the sweep (``workers``
  CPUs), or on an existing cluster (``address``), or on the Ray this process is already
  connected to. Ray retries a task whose worker died (``max_retries = retries``), so a death
  costs only that task.

Public surface:
    Engine(kind="serial", workers=1, address=None, retries=2)   .name
    run_tasks(engine, tasks, on_outcome)     calls ``on_outcome(outcome)`` as tasks finish
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from blockdraft.oracle.errors import OracleError
from blockdraft.oracle.sweep.tasks import ShardOutcome, Task, run_task, run_task_in_worker

ENGINES = ("serial", "processes", "ray")


@dataclass(frozen=True)
class Engine:
    """How a sweep runs its tasks (see the module docstring).

    Attributes:
        kind: ``"serial"``, ``"processes"`` or ``"ray"``.
        workers: local processes (``processes``), or the CPUs of a local Ray (``ray`` without
            ``address``; ignored when joining a cluster).
        address: ``ray``: a cluster to join (``"auto"``, ``"HOST:PORT"``,
            ``"ray://HOST:PORT"``); None starts a local Ray (or uses the one this process
            is connected to).
        retries: times a task whose worker died is run again.
    """

    kind: str = "serial"
    workers: int = 1
    address: str | None = None
    retries: int = 2

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise OracleError(f"unknown engine {self.kind!r}; use one of {', '.join(ENGINES)}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or (
                self.workers < 1):
            raise OracleError(f"workers must be an integer >= 1, got {self.workers!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or (
                self.retries < 0):
            raise OracleError(f"retries must be an integer >= 0, got {self.retries!r}")
        if self.address is not None and self.kind != "ray":
            raise OracleError("an address is a Ray cluster's; use kind='ray'")

    @property
    def name(self) -> str:
        """``"serial"``, ``"processes:N"``, ``"ray:local:N"`` or ``"ray:ADDRESS"``."""
        if self.kind == "serial":
            return "serial"
        if self.kind == "processes":
            return f"processes:{self.workers}"
        return f"ray:{self.address}" if self.address else f"ray:local:{self.workers}"


OnOutcome = Callable[[ShardOutcome], None]


def run_tasks(engine: Engine, tasks: Sequence[Task], on_outcome: OnOutcome) -> None:
    """Run every task on ``engine``, calling ``on_outcome`` in this process as each finishes
    (in any order).

    Raises:
        OracleError: a task failed (the first failure; on a pool, the others in flight are
            cancelled), or its worker died more than ``engine.retries`` times.
        KeyboardInterrupt: passed on, after the pool or Ray was shut down.
    """
    if not tasks:
        return
    if engine.kind == "serial":
        for task in tasks:
            on_outcome(run_task(task))
    elif engine.kind == "processes":
        _run_processes(engine, tasks, on_outcome)
    else:
        from blockdraft.oracle.sweep.ray_engine import run_ray

        run_ray(engine, tasks, on_outcome)


def _run_processes(engine: Engine, tasks: Sequence[Task], on_outcome: OnOutcome) -> None:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    todo = list(tasks)
    todo.reverse()  # pop() takes them in the given order
    deaths = dict.fromkeys((t.index for t in tasks), 0)
    context = multiprocessing.get_context("spawn")
    while todo:
        pool = ProcessPoolExecutor(max_workers=engine.workers, mp_context=context)
        running: dict[Future[ShardOutcome], Task] = {}
        lost: list[Task] = []
        try:
            while (todo or running) and not lost:
                while todo and len(running) < 2 * engine.workers:
                    task = todo.pop()
                    running[pool.submit(run_task_in_worker, task)] = task
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in done:
                    task = running.pop(future)
                    try:
                        outcome = future.result()
                    except BrokenProcessPool:  # a worker died: the pool is gone
                        lost.append(task)
                        continue
                    on_outcome(outcome)
            lost.extend(running.values())  # in flight when the pool broke: gone with it
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        for task in lost:
            deaths[task.index] += 1
            if deaths[task.index] > engine.retries:
                raise OracleError(
                    f"a worker process died {deaths[task.index]} times while running "
                    f"{task.setting.label!r} (examples {task.examples[0]}.."
                    f"{task.examples[-1]}); it gives up after {engine.retries} retries: look "
                    "for a crash in that configuration (memory, a native library)")
        todo.extend(reversed(lost))  # first in line for the new pool
