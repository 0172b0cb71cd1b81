"""A Griffe extension for the API pages: gflow's docstrings name objects with Sphinx roles
(``:func:`simulate```); shown as code instead of as the raw role."""

import re

import griffe

_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):`~?([^`]+)`")


class SphinxRolesAsCode(griffe.Extension):
    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(r"``\1``", obj.docstring.value)
