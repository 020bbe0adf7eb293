"""Install ddpo_grpo: `pip install -e .` (add `.[test]` for the test suite)."""
from setuptools import find_packages, setup

setup(
    name="ddpo_grpo",
    version="0.1.0",
    description="Fine-tune diffusion and flow-matching generators with group-relative policy optimisation (GRPO).",
    packages=find_packages(include=["ddpo_grpo", "ddpo_grpo.*", "reward_models", "reward_models.*"]),
    package_data={"ddpo_grpo": ["data/*.txt", "data/*.jsonl", "data/shapes_sd3/*.json", "data/shapes_sd3/*/*",
                               "data/shapes_sd/*.json", "data/shapes_sd/*/*"]},
    python_requires=">=3.10",
    install_requires=[
        "torch",
        "torchvision",
        "diffusers",
        "transformers",
        "accelerate",
        "ml-collections",
        "absl-py",
        "peft",
        "safetensors",
        "open_clip_torch",
        "wandb",
        "pillow",
        "numpy",
        "tqdm",
        "matplotlib",
    ],
    extras_require={"test": ["pytest"]},
)
