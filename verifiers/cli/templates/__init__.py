"""Files that ``vf-init`` copies into a new environment package.

Each ``*.tmpl`` file is a ``string.Template``: ``$name`` is the package name
(``my-env``), ``$module`` the module name (``my_env``) and ``$title`` a readable
title. The ``.tmpl`` suffix keeps linters and pytest away from them.
"""

__all__: list[str] = []  # data files only
