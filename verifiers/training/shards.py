"""Parameters sharded across processes (DeepSpeed ZeRO-3, FSDP2): gathering them whole, briefly.

Below the stages: the weight sync (weights/sync.py) and the reference model (loss/reference.py)
gather the same way.

- ``zero3_gather`` / ``no_gather``: a ``GatherFn``, ``(params, modify=False) -> context``, under
  which ``params`` are whole on every rank (ZeRO-3), or a no-op (everything else).
- ``full_tensor``: an FSDP2 ``DTensor`` all-gathered (collective), a plain tensor as it is.
- ``param_shape``: a parameter's full shape, known without gathering.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from typing import Any

import torch

GatherFn = Callable[..., ContextManager[Any]]  # (params, modify=False) -> context


def zero3_gather(params: list[torch.nn.Parameter], modify: bool = False) -> ContextManager[Any]:
    """Gather ZeRO-3-partitioned ``params`` on every rank for the duration of the block.

    With ``modify`` the block may change them: on exit rank 0's values are broadcast and
    each rank keeps its shard of them (without it, changes are dropped with the gathered copy).
    """
    import deepspeed  # only reached under ZeRO-3

    return deepspeed.zero.GatheredParameters(params, modifier_rank=0 if modify else None)


def no_gather(params: list[torch.nn.Parameter], modify: bool = False) -> ContextManager[Any]:
    return contextlib.nullcontext()


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: an FSDP2 ``DTensor`` (this rank's shard) is all-gathered, so every rank
    must call this for the same tensors in the same order; a plain tensor is returned as is."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


def param_shape(p: torch.nn.Parameter) -> tuple[int, ...]:
    return tuple(getattr(p, "ds_shape", p.shape))  # a ZeRO-3 shard's full shape
