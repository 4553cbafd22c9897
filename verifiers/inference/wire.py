"""What the trainer and a vf-vllm server agree on for a weight transfer: the protocol's names and its files.

Both processes import this module (the trainer's side is verifiers/inference/client/, the server's
verifiers/inference/server/); neither imports the other.

* The protocol's names: :data:`TRANSPORTS` (what ``/vf/weights/begin`` accepts), the admin-token
  header, the safetensors metadata key carrying an uploaded adapter's config.
* Its files: a weight file, adapter folder or probe lives in :func:`transfer_dir` (``/dev/shm``,
  else the temp dir) under a name :func:`new_name` makes; the server reads only such files and
  deletes only such folders (:func:`is_transfer_name`).
* Their owners: what travels through ``/dev/shm`` is memory until someone removes it, so every
  such file and folder is owned (verifiers/utils/owned_files.py): the weight file by its trainer,
  an adapter folder by its writer (:func:`new_lora_dir`) until the server holds it and then by the
  server, which removes it when the adapter is replaced or the server stops. What a killed process
  left, the next trainer or vf-vllm start removes (:func:`remove_abandoned_transfer_files`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from verifiers.utils import owned_files

logger = logging.getLogger(__name__)

TRANSPORTS = ("nccl", "ipc", "shm", "http")
FILE_PREFIX = "vf-"  # the server only reads/deletes transport files named like this
ADAPTER_CONFIG_KEY = "vf_adapter_config"  # safetensors metadata key of an uploaded LoRA
ADMIN_HEADER = "X-VF-Admin-Token"  # the admin token of the server's /vf/... routes


def transfer_dir(min_free_bytes: int = 0) -> Path:
    """``/dev/shm`` when it exists, is writable and has room; otherwise the temp dir."""
    shm = Path(owned_files.SHM_DIR)
    try:
        if shm.is_dir() and os.access(shm, os.W_OK):
            st = os.statvfs(shm)
            if st.f_bavail * st.f_frsize > min_free_bytes * 1.1:
                return shm
    except OSError:
        pass
    return Path(tempfile.gettempdir())


def new_name(kind: str, suffix: str = "") -> str:
    """A unique transport file name the server accepts (``vf-<kind>-<pid>-<random>``)."""
    return f"{FILE_PREFIX}{kind}-{os.getpid()}-{uuid.uuid4().hex[:12]}{suffix}"


def is_transfer_name(path: str | os.PathLike, kind: str) -> bool:
    """Whether ``path`` is absolute and named as :func:`new_name` names a ``kind`` file.

    The server reads only such files and deletes only such adapter folders, so a
    user's own folder that merely starts with ``vf-`` is never removed.
    """
    import re

    p = Path(path)
    return (
        p.is_absolute()
        and re.fullmatch(rf"{FILE_PREFIX}{kind}-\d+-[0-9a-f]{{12}}(\.safetensors)?", p.name) is not None
    )


@contextlib.contextmanager
def new_lora_dir(root: Path) -> Iterator[Path]:
    """A new adapter folder under ``root``, owned by this process; removed if the block fails."""
    out = root / new_name("lora")
    out.mkdir(parents=True)
    owned_files.hold(out)
    try:
        yield out
    except BaseException:
        owned_files.release(out)
        raise


def remove_abandoned_transfer_files() -> None:
    """Remove the weight files and adapter folders that processes killed on this machine left in
    ``/dev/shm`` or the temp dir (a SIGKILL, the OOM killer: no cleanup ran). Only paths no live
    process holds (verifiers/utils/owned_files.py), and only this user's."""
    dirs = {Path(owned_files.SHM_DIR), Path(tempfile.gettempdir())}
    found = [
        p for d in dirs if d.is_dir() for kind in ("weights", "lora")
        for p in d.glob(f"{FILE_PREFIX}{kind}-*") if is_transfer_name(p, kind)
    ]  # fmt: skip
    removed = owned_files.remove_abandoned(found)
    if removed:
        logger.info(
            "removed %d weight-transfer file(s) and adapter folder(s) (%.0f MB in files) that killed "
            "processes left: %s",
            len(removed), sum(removed.values()) / 2**20, ", ".join(sorted(removed)),
        )  # fmt: skip
