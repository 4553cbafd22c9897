"""Training across several processes (accelerate): one object to all, and step metrics from all.

Both are collective: every process must call them, in the same order.
"""

from __future__ import annotations

from typing import Any

import torch


def broadcast(accelerator: Any, obj: Any) -> Any:
    """The main process's ``obj`` (any picklable object) on every process."""
    if accelerator.num_processes == 1:
        return obj
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([obj], from_process=0)[0]


def combine_metrics(accelerator: Any, values: dict[str, float], device: Any) -> dict[str, float]:
    """Every process's step metrics combined (names from the main process; NaN where one lacks it):
    the mean, except names ending in ``/min`` and ``/max``, which take the minimum and maximum."""
    names = broadcast(accelerator, sorted(values))
    if not names:
        return {}
    t = torch.tensor([values.get(n, float("nan")) for n in names], device=device, dtype=torch.float64)
    every = accelerator.gather(t[None]).view(-1, len(names)).cpu()
    valid = ~torch.isnan(every)
    mean = torch.nansum(every, 0) / valid.sum(0).clamp(min=1)
    lo = torch.where(valid, every, torch.inf).min(0).values
    hi = torch.where(valid, every, -torch.inf).max(0).values
    pick = {"min": lo, "max": hi}
    return {n: float(pick.get(n.rsplit("/", 1)[-1], mean)[i]) for i, n in enumerate(names)}
