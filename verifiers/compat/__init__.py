"""Old module paths, in one place: the 0.1.x paths, the guides' ``verifiers.rl.trainer``, 0.2's ``verifiers.rollout``.

``paths.py`` is the table (old path -> the module it is now, or the names it
re-exported); ``finder.py`` is the import hook that serves it, installed by
``import verifiers``. No file exists at an old path: ``import verifiers.envs.tool_env``
gives ``verifiers.envs.tool`` itself.

compat sits above ``types`` and ``utils``: they import nothing from it, and the hook gives
their refused 0.1.x names (``finder.REFUSING_ON_LOAD``). The env and rubric modules import
``refused.py`` and ``forms.py`` themselves.
"""

from verifiers.compat.finder import install
from verifiers.compat.paths import MOVED, NEEDS_EXTRA, OLD_PATHS, REEXPORTED

__all__ = ["MOVED", "NEEDS_EXTRA", "OLD_PATHS", "REEXPORTED", "install"]
