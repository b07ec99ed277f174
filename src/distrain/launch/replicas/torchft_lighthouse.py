"""TorchFT's lighthouse without importing torch: ``python3 torchft_lighthouse.py --bind … …``.

The ``torchft_lighthouse`` command TorchFT 0.2.0 installs is ``from torchft._torchft import
lighthouse_main``.  Importing ``torchft._torchft`` runs ``torchft/__init__.py`` first, which
imports torch, torchft.manager and OpenTelemetry: 2.2 s (``python -X importtime``) on a quiet
2-core machine, 6.8–16.2 s beside two busy loops (load 4–6), where ``distrain run`` gave up
after 10 s (a py-spy dump at 1.5 s: the command still inside ``torch/_meta_registrations.py``).
The lighthouse is Rust inside that one extension module and needs none of it: loaded from its
file alone it listened after 0.06–0.09 s (load 3.3) and 0.29–0.60 s (load 6).

Run it as a file, never with ``-m`` or ``-c``: the Rust side parses the process's arguments from
the interpreter's first one on, which must be this file's path (as it is the console script's).
"""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec


def extension_spec() -> ModuleSpec | None:
    """Where ``torchft._torchft`` is, found without importing the ``torchft`` package."""
    import importlib.machinery as machinery
    import importlib.util

    package = importlib.util.find_spec("torchft")  # a top-level name: found, not imported
    for folder in (package.submodule_search_locations or []) if package else []:
        loaders = (machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES)
        spec = machinery.FileFinder(folder, loaders).find_spec("torchft._torchft")
        if spec is not None:
            return spec
    return None


def main() -> int:
    """Run the lighthouse with this process's arguments; its exit code."""
    import importlib.util

    spec = extension_spec()
    if spec is None or spec.loader is None:
        print("torchft's extension module torchft._torchft is not installed", file=sys.stderr)
        return 2
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        return int(module.lighthouse_main() or 0)
    except RuntimeError as err:  # "Address already in use (os error 98)": one line, no traceback
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    del sys.path[0]  # this file's folder (distrain/launch) must shadow no module imported below
    sys.exit(main())
