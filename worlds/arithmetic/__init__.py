"""ArithmeticWorld: synthetic arithmetic word problems with worked answers ending in ``#### N``, a train / held-out
split by template and number range, and a tiny Qwen2 language model pretrained on them (spec:
``worlds/arithmetic/README.md``; commands: ``python -m worlds.arithmetic --help``)."""
