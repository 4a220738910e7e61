"""The update methods, one folder each (as PEFT's tuners/<method>/):

- `config.py`: its own settings, read from CKL_<NAME>_* (core.settings.Settings.method_config);
- `layer.py`: what it adds to the model;
- `serving.py`: its core.served.ServedMethod; `training.py`: its core.training.UpdateMethod;
- `__init__.py`: one core.registry.register call.

Importing this package registers every folder in it; a new method is a new folder and touches nothing else.
"""
from __future__ import annotations

import pkgutil
from importlib import import_module


def discover(path: list[str] | None = None, package: str = __name__) -> list[str]:
    """Import (and so register) every method folder under `path` (default: this package's)."""
    found = []
    for module in pkgutil.iter_modules(path or __path__):
        if module.ispkg:
            import_module(f"{package}.{module.name}")
            found.append(module.name)
    return found


discover()
