"""Group rollouts: `group_size` trajectories for each of many prompts, all at once.

Every trajectory is its own task; a semaphore caps how many are in flight (generating or waiting on
tools). Nothing waits for a whole turn of the batch to finish, which is what lets tool latency
overlap with generation.

Given `sample_ids`, each trajectory is named (prompt, sample) and seeds its requests from that name
(seeds.py), so the tokens it samples do not depend on the order the tasks happen to run in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from tqdm.auto import tqdm

from rlfactory_nb.rollout.player import EpisodePlayer
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.types import Trajectory


async def rollout_groups(
    agent: EpisodePlayer,
    rows: Sequence[dict[str, Any]],
    group_size: int,
    max_in_flight: int = 256,
    progress: bool = False,
    sample_ids: Callable[[int, int], SampleId] | None = None,
    keep_open: bool = False,
) -> list[list[Trajectory]]:
    """Trajectories grouped by prompt: result[i] holds `group_size` rollouts of rows[i].

    A row is `{"messages": [...], "ground_truth": ..., **columns}`; the columns land in each
    trajectory's metadata (reward functions see them as `sample.metadata`). `sample_ids(prompt,
    sample)` names the sample-th rollout of rows[prompt] for its seeds; None leaves them unseeded.
    `keep_open`: leave each episode's environment open for the reward functions (`agent.env_of`)
    until `agent.close_episodes()`; if the rollouts fail, the ones kept so far are closed.
    """
    limit = asyncio.Semaphore(max_in_flight)
    finished: list[Trajectory] = []
    bar = tqdm(total=len(rows) * group_size, desc="rollouts", disable=not progress, leave=False)

    async def one(prompt_index: int, sample_index: int) -> Trajectory:
        row = rows[prompt_index]
        metadata = {"prompt_index": prompt_index, "sample_index": sample_index}
        async with limit:
            sample_id = sample_ids(prompt_index, sample_index) if sample_ids is not None else None
            traj = await agent.rollout(row, metadata, sample_id, keep_open=keep_open)
        finished.append(traj)
        bar.update(1)
        return traj

    tasks = [asyncio.ensure_future(one(p, s)) for p in range(len(rows)) for s in range(group_size)]
    try:
        flat = await asyncio.gather(*tasks)
    except BaseException:
        # The others stop too (each closes its episode as it is cancelled), and the episodes kept
        # open so far are closed: only this call's, as another step's rollouts may hold theirs.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if keep_open:
            await agent.close_episodes(finished)
        raise
    finally:
        bar.close()
    return [list(flat[p * group_size : (p + 1) * group_size]) for p in range(len(rows))]
