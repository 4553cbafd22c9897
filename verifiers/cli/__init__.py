"""The ``vf-*`` commands, one module each (setup.py's console scripts); ``common.py`` is what they share.

``vf-eval`` eval.py, ``vf-init`` init.py, ``vf-install`` install.py, ``vf-models`` models.py,
``vf-setup`` setup.py, ``vf-vllm`` vllm.py, ``vf-train`` train.py, ``vf-rl`` rl/ (plan, launcher);
``run_config/`` reads the TOML that vf-rl and vf-train share. The cli depends on the
rest of the package, never the reverse.
"""

__all__ = [
    "common",
    "eval",
    "init",
    "install",
    "models",
    "progress",
    "rl",
    "run_config",
    "setup",
    "train",
    "vllm",
]
