"""Rule-based (verifiable) rewards for language-model responses, routed by a row's ``data_source``.

Importing this package registers the ``verifiable`` reward (:mod:`.routing`); the scorers are
:mod:`.math_answer`, :mod:`.text_match`, :mod:`.label_match` and :mod:`.code_reward` (programs run in
:mod:`.code_sandbox`, confined by :mod:`.sandbox_child`). docs/rewards.md, "Rewards for language models".
"""

from .code_sandbox import RunResult, SandboxLimits, run_program
from .routing import DATA_SOURCES, VerifiableReward, verifiable

__all__ = ["DATA_SOURCES", "RunResult", "SandboxLimits", "VerifiableReward", "run_program", "verifiable"]
