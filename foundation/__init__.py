"""The foundation: what the core (``ddpo_grpo``), the rewards (``reward_models``) and the worlds all stand on.

It imports none of them. Modules:

* :mod:`foundation.images`: float images ↔ uint8 / PIL, videos, and reading a row's image field;
* :mod:`foundation.errors`: :class:`~foundation.errors.UserError`, bad input that the user fixes;
* :mod:`foundation.plugins`: named extensions of installed packages (entry points) and users' own files;
* :mod:`foundation.atomic_io`: writing a file so that a reader sees the old version or the new, never half;
* :mod:`foundation.moved`: keeping an old import path working for one release after a module moves.
"""
