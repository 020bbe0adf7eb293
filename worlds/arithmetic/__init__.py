"""ArithmeticWorld: synthetic arithmetic word problems with worked answers ending in ``#### N``, a train / held-out
split by template and number range, and a tiny Qwen2 language model pretrained on them (spec:
``worlds/arithmetic/README.md``; commands: ``python -m worlds.arithmetic --help``)."""

from pathlib import Path

#: the shipped base model (a Qwen2ForCausalLM and its tokenizer): ``pretrained.model`` of config/llm.py:quick
ARITHMETIC_BASE = str(Path(__file__).resolve().parent / "models" / "base")
