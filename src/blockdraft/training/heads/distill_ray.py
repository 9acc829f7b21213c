"""Distillation shards generated on Ray actors (``blockdraft heads distill --ray [ADDRESS]``).

Each actor loads the base once and generates whole shards, exactly as the serial data step
does (:func:`~blockdraft.training.heads.distill_shard.generate_shard`: the shard's prompts sorted
by length, in batches of ``batch_size``), so a shard is the same whichever process made it;
the driver writes each shard as it arrives. An actor whose process dies is restarted (the base
loaded again) and its shard run again (``retries`` times). Ray is the ``blockdraft[ray]``
extra, imported here only. On a cluster of several machines the base must load by the same
name or path on each.

Public surface:
    ray_shards(base, dtype, prompt_ids, specs, settings, eos_id, pad_id, *, address=None,
               workers=2, threads=1, retries=2) -> iterator of (spec, Shard, seconds)
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

from blockdraft.core.extras import import_optional
from blockdraft.training.errors import TrainingError
from blockdraft.training.heads.distill_shard import DistillSettings, generate_shard
from blockdraft.training.heads.shards import Shard


class _ShardWorker:
    """One actor: the base, loaded once; :meth:`shard` generates one shard."""

    def __init__(self, base: str, dtype: str, threads: int) -> None:
        import torch

        from blockdraft.models.hf.loading import load_causal_lm

        torch.set_num_threads(threads)
        self.model, _ = load_causal_lm(base, dtype)

    def shard(self, prompts: dict[int, list[int]], spec: dict[str, Any],
              settings: dict[str, Any], eos_id: int | None, pad_id: int
              ) -> tuple[Shard, float]:
        start = time.monotonic()
        shard = generate_shard(self.model, prompts, spec["prompts"], DistillSettings(**settings),
                               eos_id, pad_id, name=spec["name"])
        return shard, time.monotonic() - start


def ray_shards(
    base: str,
    dtype: str,
    prompt_ids: Sequence[Sequence[int]],
    specs: Sequence[dict[str, Any]],
    settings: Any,
    eos_id: int | None,
    pad_id: int,
    *,
    address: str | None = None,
    workers: int = 2,
    threads: int = 1,
    retries: int = 2,
) -> Iterator[tuple[dict[str, Any], Shard, float]]:
    """Generate the shards ``specs`` (the plan's entries) on ``workers`` Ray actors.

    Args:
        base, dtype: what each actor loads (:func:`~blockdraft.models.hf.loading
            .load_causal_lm`).
        prompt_ids: every prompt's token ids (a shard sends only its own).
        specs: the shards to generate, ``{"name", "split", "prompts"}`` each.
        settings: the set's
            :class:`~blockdraft.training.heads.distill_shard.DistillSettings`.
        eos_id, pad_id: as the serial data step's.
        address: a Ray cluster to join; None starts a local Ray of ``workers`` CPUs (shut
            down at the end).
        workers: actors (one CPU each).
        threads: torch threads per actor.
        retries: restarts of a dead actor, and runs again of its shard.

    Yields:
        ``(spec, shard, seconds)`` in the order the shards finish.

    Raises:
        TrainingError: Ray missing or unreachable, or an actor that failed.
    """
    ray = import_optional("ray", "ray", "heads distill --ray", TrainingError)
    started = False
    if not ray.is_initialized():
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise TrainingError(f"cannot start or join {address or 'a local Ray'}: "
                                f"{' '.join(str(e).split())}") from e
        started = True
    try:
        cls = ray.remote(num_cpus=1, max_restarts=retries, max_task_retries=retries)(
            _ShardWorker)
        actors = [cls.remote(base, dtype, threads) for _ in range(max(1, workers))]
        frozen = asdict(settings)
        queue = list(specs)
        running: dict[Any, tuple[dict[str, Any], Any]] = {}

        def submit(actor: Any) -> None:
            spec = queue.pop(0)
            prompts = {int(i): list(prompt_ids[int(i)]) for i in spec["prompts"]}
            running[actor.shard.remote(prompts, spec, frozen, eos_id, pad_id)] = (spec, actor)

        for actor in actors:
            if queue:
                submit(actor)
        while running:
            done, _ = ray.wait(list(running), num_returns=1)
            spec, actor = running.pop(done[0])
            try:
                shard, seconds = ray.get(done[0])
            except ray.exceptions.RayError as e:
                raise TrainingError(f"shard {spec['name']} failed on a Ray actor: "
                                    f"{' '.join(str(e).split())[-500:]}") from e
            if queue:
                submit(actor)
            yield spec, shard, seconds
    finally:
        if started:
            ray.shutdown()
