"""What a GRPO checkpoint adds to ``transformers.Trainer``'s: the rollouts in flight,
and a mark that the checkpoint was written completely.

``Trainer`` already saves and restores the model or adapter, optimizer,
scheduler, RNG and ``trainer_state.json`` (the optimizer step, so its dataloader
of step tickets skips to the right place). A GRPO run also has state outside the
model:

- ``generator_state.pt`` (main process): the prompt cursor (how far into the
  dataset the generator has read) and the generated batches not yet trained. They
  were sampled from older weights, which a resumed run cannot reproduce, so they
  are saved rather than regenerated.
- ``grpo_buffer_rank{r}.pt`` (every process): this process's ``PreparedBatch``, the
  batch being trained when the checkpoint was taken, if the step fell inside one
  (``num_iterations > 1`` or ``steps_per_generation > gradient_accumulation_steps``),
  with the old and reference log-probs computed at its start. (The file name and its
  ``"buffer"`` key are what earlier versions wrote, kept so their checkpoints resume.)
- ``checkpoint_complete.json`` (main process, written last): ``Trainer`` fills
  ``checkpoint-<step>/`` file by file, so a run killed while saving leaves a folder
  that looks like a checkpoint but is not one. Every file is flushed to disk
  before the mark is written (atomically), so a folder with the mark is whole even
  after a power loss, and resuming only ever picks marked folders. The mark holds a
  manifest: every file's relative path, size and crc32.

A file can still change after the mark (disk trouble, a bad copy, a half-synced
network file system). ``verify`` compares a folder with its manifest and returns the
first problem as a ``CheckpointProblem`` (a file missing, of another size, with other
bytes, or a mark that cannot be read). Resuming with ``True`` skips a checkpoint that
fails it for the newest earlier one that passes, with one line, and moves it aside to
``corrupt-checkpoint-<step>``; a folder named explicitly that fails it is refused
with one ``ConfigError``. A mark written before manifests existed is trusted, as it
was then.

A write that fails (disk full, read-only or unwritable folder) becomes one
``CheckpointError`` (``disk_error``) naming the folder, the cause and the fix;
the trainer then removes the half-written folder (checkpoint_save.py). Rotation
renames a folder aside before deleting it, so a deletion that fails half way
never leaves something that looks like a complete checkpoint.

Our files hold data only (tensors, dicts, lists, strings, numbers) with a
``format`` version, each written atomically (temp file + rename) and read with
``torch.load(weights_only=True)``, which runs no code from the file. Files of the
old format (format 1: pickled classes, verifiers before checkpoints became data)
are refused with one line that says what to delete to resume without them.
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import json
import logging
import os
import pickle
import re
import shutil
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from verifiers.errors import CheckpointError, ConfigError
from verifiers.utils.logging import warn_once

if TYPE_CHECKING:  # imported where used: vf-rl reads checkpoint folders without the training stack
    from verifiers.training.types import GeneratedBatch, PreparedBatch

logger = logging.getLogger("verifiers.training.lifecycle.checkpoint")

GENERATOR_FILE = "generator_state.pt"
PREPARED_FILE = "grpo_buffer_rank{rank}.pt"  # the name earlier versions wrote
COMPLETE_FILE = "checkpoint_complete.json"
FORMAT_VERSION = 2  # of our files; 1 was pickled dataclasses (loaded with weights_only=False)
INCOMPLETE_PREFIX = "incomplete-"  # a half-written checkpoint moved aside on resume
CORRUPT_PREFIX = "corrupt-"  # a complete checkpoint whose files changed since, moved aside on resume
DELETING_PREFIX = "deleting-"  # a rotated-out checkpoint, renamed before it is deleted
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _load(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        data = None  # pickled classes: the old format
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
        raise ConfigError(
            f"{path} is not a format-{FORMAT_VERSION} verifiers checkpoint file (older ones pickled classes)",
            hint=f"delete {GENERATOR_FILE} and grpo_buffer_rank*.pt from {path.parent} to resume without "
            "the pending rollouts (they are generated again), or resume with the version that wrote it",
        )
    return data


def save_generator_state(checkpoint_dir: str | os.PathLike, state: dict[str, Any]) -> None:
    """``BatchGenerator.state_dict()`` as data: counters, producer state and the pending batches."""
    data = {
        "format": FORMAT_VERSION,
        "trained": int(state["trained"]),
        "next": int(state["next"]),
        "producer": _plain(state["producer"]),
        "pending": [_batch_data(b) for b in state["pending"]],
    }
    _save(data, Path(checkpoint_dir) / GENERATOR_FILE)


def load_generator_state(checkpoint_dir: str | os.PathLike) -> dict[str, Any] | None:
    data = _load(Path(checkpoint_dir) / GENERATOR_FILE)
    if data is None:
        warn_once(logger, "resume-no-gen", "checkpoint has no %s: prompt position estimated", GENERATOR_FILE)
        return None
    pending = [_batch_from_data(b) for b in data["pending"]]
    return {
        "trained": data["trained"],
        "next": data["next"],
        "producer": data["producer"],
        "pending": pending,
    }


def save_prepared_batch(checkpoint_dir: str | os.PathLike, rank: int, prepared: PreparedBatch | None) -> None:
    """This process's batch in training (None between batches: then a resume starts a new one)."""
    data = None if prepared is None else _plain(_fields(prepared))
    _save({"format": FORMAT_VERSION, "buffer": data}, Path(checkpoint_dir) / PREPARED_FILE.format(rank=rank))


def load_prepared_batch(checkpoint_dir: str | os.PathLike, rank: int) -> PreparedBatch | None:
    from verifiers.training.types import PreparedBatch

    data = _load(Path(checkpoint_dir) / PREPARED_FILE.format(rank=rank))
    return PreparedBatch(**data["buffer"]) if data is not None and data["buffer"] is not None else None


# ---- our objects as data ---------------------------------------------------------------------------
def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _plain(value: Any) -> Any:
    """``value`` as what a ``weights_only`` load accepts: tensors, numbers, strings, dicts, lists.

    Rollouts may carry other objects (an OpenAI SDK message in a completion, a numpy
    number in a state): pydantic models and dataclasses become dicts, numpy scalars
    numbers, anything else its ``str`` (those values only feed logs and sample tables).
    """
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return value
    if isinstance(value, dict):
        return {k if isinstance(k, (str, int)) else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(_fields(value))
    if callable(getattr(value, "item", None)):  # numpy scalar
        return _plain(value.item())
    return str(value)


def _batch_data(batch: GeneratedBatch) -> dict[str, Any]:
    data = _fields(batch)
    for name in ("outputs", "processed"):
        data[name] = None if data[name] is None else _fields(data[name])
    return _plain(data)


def _batch_from_data(data: dict[str, Any]) -> GeneratedBatch:
    from verifiers.training.types import GeneratedBatch
    from verifiers.types import GenerateOutputs, ProcessedOutputs

    outputs, processed = data["outputs"], data["processed"]
    return GeneratedBatch(
        **{
            **data,
            "outputs": None if outputs is None else GenerateOutputs(**outputs),
            "processed": None if processed is None else ProcessedOutputs(**processed),
        }
    )


def has_optimizer_state(checkpoint_dir: str | os.PathLike) -> bool:
    """Whether ``Trainer`` saved optimizer state here (not with ``save_only_model=True``)."""
    d = Path(checkpoint_dir)
    return any((d / name).exists() for name in ("optimizer.pt", "optimizer.bin")) or any(
        d.glob("global_step*")
    )


# ---- completeness --------------------------------------------------------------------------------
# The manifest's checksum: zlib.crc32, streamed in 1 MiB blocks. The cheapest checksum in the
# standard library (about 0.5 s of one core per GB, zlib 1.2.13; sha256 takes twice that, blake2b
# four times), read once when the mark is written (the files are usually still in the page cache
# then) and once more when a resume picks the checkpoint. It catches what a disk, a copy or a
# half-synced network file system does to a file (a torn block, flipped bits, zeros where data
# was); it is no defence against someone who edits a file on purpose, which is not its job.
_BLOCK = 1 << 20


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            crc = zlib.crc32(block, crc)
    return crc


def _manifest_files(d: Path) -> list[Path]:
    """Every regular file under ``d`` but the mark (and its temp file), by relative path."""
    skip = {COMPLETE_FILE, COMPLETE_FILE + ".tmp"}
    return sorted(
        p
        for p in d.rglob("*")
        if p.is_file() and not p.is_symlink() and p.relative_to(d).as_posix() not in skip
    )


def mark_complete(checkpoint_dir: str | os.PathLike, global_step: int) -> None:
    """Flush every file of the checkpoint to disk, then write the mark with the manifest (every
    file's size and crc32, what ``verify`` checks later); call after all files exist."""
    d = Path(checkpoint_dir)
    manifest: dict[str, dict[str, int]] = {}
    for path in _manifest_files(d):
        _fsync(path)
        manifest[path.relative_to(d).as_posix()] = {"size": path.stat().st_size, "crc32": _crc32(path)}
    tmp = d / (COMPLETE_FILE + ".tmp")
    files = sorted(p.name for p in d.iterdir() if p.name != tmp.name)  # listed before the mark exists
    mark = {"global_step": global_step, "files": files, "manifest": {"checksum": "crc32", "files": manifest}}
    with open(tmp, "w") as fh:
        json.dump(mark, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, d / COMPLETE_FILE)
    _fsync(d)  # the rename itself


def unmark(checkpoint_dir: str | os.PathLike) -> None:
    """Before saving into ``checkpoint_dir``: a folder being (re)written is incomplete until marked."""
    (Path(checkpoint_dir) / COMPLETE_FILE).unlink(missing_ok=True)


def is_complete(checkpoint_dir: str | os.PathLike) -> bool:
    """Whether the mark exists (the save finished); ``verify`` says whether the files are still whole."""
    return (Path(checkpoint_dir) / COMPLETE_FILE).is_file()


class Problem(enum.Enum):
    """What ``verify`` found wrong with a checkpoint folder."""

    UNMARKED = "unmarked"  # no mark: the save never finished (resume treats it as incomplete)
    MARKER = "marker"  # the mark cannot be read or parsed
    MISSING = "missing"  # a file of the manifest is gone
    SIZE = "size"  # a file has another size than when it was saved (truncated, most often)
    CHECKSUM = "checksum"  # a file has its size but other bytes
    UNREADABLE = "unreadable"  # a file of the manifest cannot be read (permissions, I/O error)


@dataclasses.dataclass(frozen=True)
class CheckpointProblem:
    """The first thing wrong with checkpoint ``folder``: ``str()`` is the phrase a log line quotes,
    e.g. ``model.safetensors: 1,048,576 bytes, expected 2,097,152``."""

    folder: Path
    kind: Problem
    file: str | None  # relative to folder; None when the mark itself is the problem
    detail: str

    def __str__(self) -> str:
        return f"{self.file}: {self.detail}" if self.file else self.detail


def verify(checkpoint_dir: str | os.PathLike, *, checksums: bool = True) -> CheckpointProblem | None:
    """The first problem of a checkpoint folder against its mark's manifest, or None when it is whole.

    A mark without a manifest (written before manifests existed) is trusted as it was then:
    None. Files not in the manifest are ignored. ``checksums=False`` compares sizes only
    (one ``stat`` per file, no reading): what rotation and error messages can afford.
    """
    d = Path(checkpoint_dir)
    mark = d / COMPLETE_FILE
    if not mark.is_file():
        return CheckpointProblem(d, Problem.UNMARKED, None, f"no {COMPLETE_FILE}")
    try:
        data = json.loads(mark.read_text())
        manifest = data.get("manifest") if isinstance(data, dict) else None
        if manifest is None and isinstance(data, dict):
            return None  # an earlier version's mark
        files = manifest["files"]
        expected = [(str(name), int(f["size"]), int(f["crc32"])) for name, f in files.items()]
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as e:
        what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return CheckpointProblem(d, Problem.MARKER, None, f"{COMPLETE_FILE} cannot be read ({what})")
    for name, size, crc in expected:
        path = d / name
        try:
            actual = path.stat().st_size if path.is_file() else None
            if actual is None:
                return CheckpointProblem(d, Problem.MISSING, name, "missing")
            if actual != size:
                return CheckpointProblem(d, Problem.SIZE, name, f"{actual:,} bytes, expected {size:,}")
            if checksums and (got := _crc32(path)) != crc:
                detail = f"content changed since it was saved (crc32 {got:08x}, expected {crc:08x})"
                return CheckpointProblem(d, Problem.CHECKSUM, name, detail)
        except OSError as e:
            return CheckpointProblem(d, Problem.UNREADABLE, name, f"cannot be read ({e.strerror or e})")
    return None


def rotate(output_dir: str | os.PathLike, save_total_limit: int | None, keep: str | None = None) -> None:
    """``save_total_limit`` done after marking: keep the newest ``save_total_limit`` complete checkpoints
    (and ``keep``, the best one); delete the other folders older than the newest complete one.

    ``Trainer`` rotates before our files and the mark are written, so a run killed
    in between could be left with no complete checkpoint at all; ours runs after.
    A complete checkpoint whose files no longer match their sizes (``verify`` without
    checksums: a ``stat`` per file) does not count towards the limit, so a truncated one
    never keeps its place at the expense of the newest whole one.
    """
    if not save_total_limit or save_total_limit <= 0:
        return
    found = checkpoints(output_dir)
    complete = [p for _, p in found if is_complete(p)]
    if not complete:
        return
    whole = [p for p in complete if verify(p, checksums=False) is None]
    protected = {p.resolve() for p in whole[-save_total_limit:]}
    if keep:
        protected.add(Path(keep).resolve())
    newest = complete[-1].resolve()
    for _, folder in found:
        if folder.resolve() == newest:
            break
        if folder.resolve() not in protected:
            logger.info("deleting %s (save_total_limit=%d)", folder, save_total_limit)
            # Renamed first (atomic): a deletion that fails half way leaves no "checkpoint".
            doomed = folder.with_name(DELETING_PREFIX + folder.name)
            os.replace(folder, doomed)
            shutil.rmtree(doomed)
    for leftover in Path(output_dir).glob(DELETING_PREFIX + "checkpoint-*"):  # an earlier failed delete
        shutil.rmtree(leftover, ignore_errors=True)


def checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``checkpoint-<step>`` folder in ``output_dir``, by step."""
    d = Path(output_dir)
    if not d.is_dir():
        return []
    found = [(m, p) for p in d.iterdir() if p.is_dir() and (m := _CHECKPOINT_RE.match(p.name))]
    return sorted((int(m.group(1)), p) for m, p in found)


def newest_good_checkpoint(
    output_dir: str | os.PathLike, *, checksums: bool = True
) -> tuple[Path | None, list[CheckpointProblem]]:
    """The highest-step complete checkpoint in ``output_dir`` that passes ``verify``, and the
    problems of the complete ones after it (newest first). Folders are verified newest first,
    and only until a good one: older ones are not read."""
    problems: list[CheckpointProblem] = []
    for _, folder in reversed(checkpoints(output_dir)):
        if not is_complete(folder):
            continue
        problem = verify(folder, checksums=checksums)
        if problem is None:
            return folder, problems
        problems.append(problem)
    return None, problems


def last_complete_checkpoint(output_dir: str | os.PathLike, *, checksums: bool = False) -> str | None:
    """The folder of the highest-step checkpoint in ``output_dir`` that was written completely and
    whose files still have their sizes (``checksums=True``: and their bytes; that reads them all)."""
    chosen, _ = newest_good_checkpoint(output_dir, checksums=checksums)
    return str(chosen) if chosen is not None else None


def resolve_resume(
    output_dir: str | os.PathLike, resume_from_checkpoint: str | bool | None, *, is_main_process: bool = True
) -> str | None:
    """The checkpoint folder to resume from (``True``: the last complete, verified one in ``output_dir``).

    Complete checkpoints after the chosen one that fail ``verify`` (a file truncated,
    missing or changed since the save) are skipped with one line and moved aside to
    ``corrupt-checkpoint-<step>``; ones that were never completed (the run was killed
    while saving) to ``incomplete-checkpoint-<step>``. The main process moves them, so
    the resumed run does not save into a folder holding stale files, nor do ``Trainer``'s
    rotation and ``get_last_checkpoint`` see them. A folder named explicitly that fails
    ``verify`` is refused (``ConfigError``) rather than handed to ``Trainer``, which would
    fail deep inside transformers or DeepSpeed.
    """
    if not resume_from_checkpoint:
        return None
    if resume_from_checkpoint is True:
        good, problems = newest_good_checkpoint(output_dir)
        if good is None:
            found = [p.name for _, p in checkpoints(output_dir)]
            if problems:
                raise ConfigError(
                    f"no intact checkpoint in {output_dir}: "
                    + "; ".join(f"{p.folder.name} is corrupt ({p})" for p in problems),
                    hint="restore the files from a copy, or pass one folder as resume_from_checkpoint "
                    f"after deleting its {COMPLETE_FILE} to resume from it unchecked",
                )
            if found:
                raise ConfigError(
                    f"no complete checkpoint in {output_dir}: {', '.join(found)} lack {COMPLETE_FILE} "
                    "(written last by GRPOTrainer; a run killed while saving leaves a folder without it)",
                    hint="pass one folder as resume_from_checkpoint to resume from it anyway",
                )
            raise ConfigError(f"no checkpoint found in {output_dir}", hint="pass a checkpoint folder")
        chosen = str(good)
        if problems:  # one line for all of them (usually one): what is wrong, where it went, what is used
            skipped = []
            for p in problems:
                moved = f", moved to {_move_aside(p.folder, CORRUPT_PREFIX).name}" if is_main_process else ""
                skipped.append(f"{p.folder.name} is corrupt ({p}){moved}")
            logger.warning("%s; resuming from %s", "; ".join(skipped), good.name)
    else:
        chosen = os.fspath(resume_from_checkpoint)
        if not Path(chosen).is_dir():
            raise ConfigError(f"checkpoint folder {chosen} does not exist")
        if not is_complete(chosen):
            warn_once(
                logger,
                f"resume-incomplete:{chosen}",
                "%s has no %s: it may be incomplete (written by an older version, or the run was killed "
                "while saving it); resuming from it anyway",
                chosen,
                COMPLETE_FILE,
            )
        elif (problem := verify(chosen)) is not None:
            raise ConfigError(
                f"checkpoint {chosen} is corrupt ({problem})",
                hint="resume from an earlier checkpoint, or set resume_from_checkpoint=True to pick the newest "
                f"intact one (delete its {COMPLETE_FILE} to resume from it unchecked)",
            )
    if is_main_process:
        _move_incomplete_aside(Path(chosen))
    if not has_optimizer_state(chosen):
        warn_once(
            logger,
            "resume-no-optim",
            "%s has no optimizer state (save_only_model=True): the optimizer restarts",
            chosen,
        )
    return chosen


def _move_aside(folder: Path, prefix: str) -> Path:
    """Rename ``folder`` to ``<prefix><name>`` (``.1``, ``.2`` ... when taken); the new path."""
    target = folder.with_name(prefix + folder.name)
    n = 1
    while target.exists():
        target, n = folder.with_name(f"{prefix}{folder.name}.{n}"), n + 1
    os.replace(folder, target)
    return target


def _move_incomplete_aside(chosen: Path) -> None:
    m = _CHECKPOINT_RE.match(chosen.name)
    if m is None:
        return
    step = int(m.group(1))
    for later_step, folder in checkpoints(chosen.parent):
        if later_step <= step or is_complete(folder):
            continue
        target = _move_aside(folder, INCOMPLETE_PREFIX)
        logger.warning(
            "%s was not completely written (the run stopped while saving it): moved to %s",
            folder,
            target.name,
        )


# ---- disk failures -------------------------------------------------------------------------------
_HINTS = {
    errno.ENOSPC: "free space on that disk, or set output_dir to another disk or a lower save_total_limit",
    errno.EDQUOT: "free space within your quota, or set output_dir to another disk or a lower save_total_limit",
    errno.EACCES: "make output_dir writable, or set output_dir to a folder you can write",
    errno.EPERM: "make output_dir writable, or set output_dir to a folder you can write",
    errno.EROFS: "the file system is read-only: set output_dir to a writable disk",
}
_OS_ERROR_RE = re.compile(r"os error (\d+)")  # safetensors' Rust I/O errors carry the errno here
_TORCH_WRITE_RE = re.compile(r"PytorchStreamWriter|inline_container|file write failed|unexpected pos")


def disk_error(
    exc: BaseException, folder: str | os.PathLike, action: str | None = None
) -> CheckpointError | None:
    """``exc``, raised while writing checkpoint ``folder``, as one ``CheckpointError``; None when it
    is not a write failure (a bug: re-raise it as it is).

    ``OSError`` carries its errno; safetensors reports ``(os error N)`` in its message; torch's
    zip writer only says that a write failed (``unexpected pos ...``), so then a probe write
    next to ``folder`` finds the cause (a full or unwritable disk).
    """
    cause: OSError | None = exc if isinstance(exc, OSError) else None
    if cause is None and (m := _OS_ERROR_RE.search(str(exc))):
        code = int(m.group(1))
        cause = OSError(code, os.strerror(code))
    elif cause is None and isinstance(exc, RuntimeError) and _TORCH_WRITE_RE.search(str(exc)):
        cause = _probe_write(Path(folder).parent) or OSError(errno.EIO, f"write failed ({exc})")
    if cause is None:
        return None
    d = Path(folder)
    code = cause.errno
    reason = f"{cause.strerror or cause} (errno {code})" if code else str(cause)
    where = f" ({Path(cause.filename).name})" if getattr(cause, "filename", None) else ""
    last = last_complete_checkpoint(d.parent)
    kept = (
        f"; the last complete checkpoint, {Path(last).name}, is intact: resume_from_checkpoint=True resumes it"
        if last and Path(last).resolve() != d.resolve()
        else ("; no earlier complete checkpoint" if not last else f"; {d.name} itself is complete")
    )
    hint = _HINTS.get(code or 0, "check that output_dir is on a writable disk with free space")
    action = action or f"write {d.name}"
    return CheckpointError(f"could not {action} in {d.parent}{where}: {reason}{kept}", hint, errno=code)


def _probe_write(folder: Path, size: int = 1 << 20) -> OSError | None:
    """Write (and flush to disk) ``size`` bytes in ``folder``: the OSError it raises, or None."""
    probe = folder / ".vf-write-probe"
    try:
        with open(probe, "wb") as fh:
            fh.write(b"\0" * size)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as e:
        return e
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass
    return None
