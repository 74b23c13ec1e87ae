"""Deprecated aliases: old public names and old module paths kept importable for one release, each emitting a
DeprecationWarning that names its new home. A leaf module (imports nothing from the package), so every module can
use it."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Callable, Dict, Tuple


def deprecated_aliases(module_name: str, aliases: Dict[str, Tuple[str, str]]) -> Callable[[str], object]:
    """A module-level ``__getattr__`` (PEP 562) for ``module_name`` resolving each old name in ``aliases``
    (``old -> (new module, new name)``) to the object now at ``new module.new name``, with a
    ``DeprecationWarning`` "``module_name.old`` is deprecated; use ``new module.new name``"; any other name is
    an AttributeError, as for an ordinary module."""

    def __getattr__(name: str):
        if name not in aliases:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        home, new_name = aliases[name]
        warnings.warn(f"{module_name}.{name} is deprecated; use {home}.{new_name}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), new_name)

    return __getattr__


def moved_object(home: str, name: str):
    """The object now at ``home.name``, looked up when called: for a deprecated spelling in a lower module whose work
    moved to a higher one (its last release only; the layering of imports is kept, as for the moved module paths)."""
    return getattr(importlib.import_module(home), name)


class _MovedModule(types.ModuleType):
    """What an old module path resolves to: each attribute read (and written) on the module that now holds it."""

    def __init__(self, name: str, homes: Tuple[str, ...]):
        super().__init__(name, f"Deprecated alias of {', '.join(homes)}.")
        object.__setattr__(self, "_homes", homes)

    def _home_of(self, attribute: str):
        for home in self._homes:
            module = importlib.import_module(home)
            if hasattr(module, attribute):
                return module
        return None

    def __getattr__(self, attribute: str):
        module = self._home_of(attribute)
        if module is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attribute!r}")
        return getattr(module, attribute)

    def __setattr__(self, attribute: str, value) -> None:
        if attribute.startswith("__") and attribute.endswith("__"):  # the import system's own (__spec__, __loader__, …)
            object.__setattr__(self, attribute, value)
            return
        module = self._home_of(attribute)
        setattr(module if module is not None else importlib.import_module(self._homes[0]), attribute, value)

    def __dir__(self):
        return sorted({name for home in self._homes for name in dir(importlib.import_module(home))})


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old module path (``activated_dgp.spherical``) to its new home(s) with a DeprecationWarning."""

    def __init__(self, moved: Dict[str, Tuple[str, ...]]):
        self.moved = moved

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.moved:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return _MovedModule(spec.name, self.moved[spec.name])

    def exec_module(self, module) -> None:
        homes = " and ".join(module._homes)
        warnings.warn(f"{module.__name__} is deprecated; use {homes}", DeprecationWarning, stacklevel=2)


def deprecated_module_paths(moved: Dict[str, Tuple[str, ...]]) -> None:
    """Make each old module path in ``moved`` (``old -> (new module, ...)``) importable, with a DeprecationWarning
    naming its new home(s); attributes resolve on the first new module that has them."""
    if not any(isinstance(finder, _MovedModuleFinder) and finder.moved == moved for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder(moved))
