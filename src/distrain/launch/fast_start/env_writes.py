"""Variables a script sets before ``import torch`` that torch reads at import: found in its source.

The fork server imported torch (and ``torch._dynamo``) before any worker exists, so a script's
``os.environ["TORCH_LOGS"] = "+dynamo"`` at its top comes too late in a forked worker: dynamo's
logger stays at WARNING where torchrun's worker has it at DEBUG. Such a script runs in fresh
interpreters, said in one line (launch/fast_start/forkserver.py, ``fresh_reason``).

What torch reads at import was measured (torch 2.14.1: Python's ``os.environ`` reads and the C
libraries' ``getenv`` calls during ``import torch, torch._dynamo, torch.optim,
torch.distributed``, the fork server's preload; benchmarks/launch/RESULTS.md): ``TORCH*``,
``PYTORCH_*``, the inductor/AOT families, OpenMP/MKL/oneDNN/OpenBLAS thread settings, CUDA's and
cuBLAS's, Triton's, numpy's and sympy's. ``NCCL_*`` and ``TORCH_NCCL_*`` are read when an NCCL
group is made, in the worker, and need no fresh interpreter. ``CUDA_VISIBLE_DEVICES`` is counted:
the server never initialises CUDA, but a count cached by an import is not something the read can
rule out, and a wrong device set is worse than a slower start.

The read is conservative: a write whose name it cannot know (a variable key, ``update(d)``) counts,
and without any direct torch import every write counts. Writes inside functions count by source
position, which errs towards a fresh interpreter.
"""

from __future__ import annotations

import ast

#: families (prefixes) of variables read while the fork server imports torch and its preloads
READ_AT_IMPORT = (
    "TORCH",
    "PYTORCH_",
    "AOT",
    "INDUCTOR_",
    "FX_",
    "PARTITIONER_",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL",
    "DNNL_",
    "ONEDNN_",
    "OPENBLAS_",
    "GOTO_",
    "CUDA_",
    "CUBLAS",
    "CUBLASLT_",
    "NVRTC_",
    "HIP_",
    "ROCR_",
    "TRITON_",
    "KINETO_",
    "NPY_",
    "NUMPY_",
    "SYMPY_",
    "MPMATH_",
    "LD_",
)
#: inside those families, read only once the worker forms an NCCL group (not at import)
READ_LATER = ("TORCH_NCCL_",)
#: the variables whose write is only seen after the compile stack is imported, which a fresh
#: `import torch` does lazily (the first optimizer, torch.compile) and the server did already:
#: a write of one of them counts wherever it is
COMPILE_FAMILIES = ("TORCHDYNAMO_", "TORCHINDUCTOR_", "TORCH_COMPILE", "INDUCTOR_", "TORCH_LOGS")

_WRITERS = {"setdefault", "update", "pop", "clear", "__setitem__", "__delitem__", "popitem"}


def read_at_import(name: str | None) -> bool:
    """Whether torch (or the server's preload) reads variable `name` at import (None: unknown)."""
    if name is None:
        return True
    return name.startswith(READ_AT_IMPORT) and not name.startswith(READ_LATER)


def env_set_before_torch(source: str, filename: str = "<script>") -> tuple[str, int] | None:
    """(variable, line) of the first write a forked worker would not honour; None if none.

    A write counts when torch reads the variable at import and the write comes before the
    script's first ``import torch…`` in the file (or the script has none), or, for the compile
    stack's variables, wherever it is.
    """
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError):
        return None
    first_torch = min(
        (getattr(node, "lineno", 0) for node in ast.walk(tree) if _imports_torch_directly(node)),
        default=None,
    )
    environ_names, os_names = _os_bindings(tree)
    writes = sorted(_writes(tree, environ_names, os_names), key=lambda w: w[1])
    for name, line in writes:
        if not read_at_import(name):
            continue
        if first_torch is None or line < first_torch:
            return name or "a variable it names at run time", line
        if name is not None and name.startswith(COMPILE_FAMILIES):
            return name, line
    return None


def _imports_torch_directly(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] == "torch" for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] == "torch"
    return False


def _os_bindings(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(names bound to os.environ, names bound to the os module) however the script imports."""
    environ: set[str] = set()
    modules = {"os"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            environ |= {a.asname or a.name for a in node.names if a.name == "environ"}
            if any(a.name in ("putenv", "unsetenv") for a in node.names):
                modules.add("")  # bare putenv(...) / unsetenv(...)
    return environ, modules


def _is_environ(node: ast.AST, environ: set[str], modules: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in environ
    return (
        isinstance(node, ast.Attribute)
        and node.attr in ("environ", "environb")
        and isinstance(node.value, ast.Name)
        and node.value.id in modules
    )


def _key(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None  # a name known only at run time


def _writes(tree: ast.AST, environ: set[str], modules: set[str]) -> list[tuple[str | None, int]]:
    """Every write to the environment the source shows: (variable or None, line)."""
    found: list[tuple[str | None, int]] = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for target in targets:
            if isinstance(target, ast.Subscript) and _is_environ(target.value, environ, modules):
                found.append((_key(target.slice), getattr(node, "lineno", 0)))
            elif _is_environ(target, environ, modules):  # os.environ |= {...}; environ = ...
                found.append((None, getattr(node, "lineno", 0)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, attr = node.func.value, node.func.attr
            if attr in _WRITERS and _is_environ(owner, environ, modules):
                found += _call_keys(node)
            elif (
                attr in ("putenv", "unsetenv")
                and isinstance(owner, ast.Name)
                and owner.id in modules
            ):
                found.append((_key(node.args[0] if node.args else None), node.lineno))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("putenv", "unsetenv")
            and "" in modules
        ):
            found.append((_key(node.args[0] if node.args else None), node.lineno))
    return found


def _call_keys(call: ast.Call) -> list[tuple[str | None, int]]:
    """The variables an ``os.environ.<method>(...)`` call writes (None where unknown)."""
    line = call.lineno
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("update",):
        keys: list[tuple[str | None, int]] = [(kw.arg, line) for kw in call.keywords]
        for arg in call.args:
            if isinstance(arg, ast.Dict):
                keys += [(_key(k), line) for k in arg.keys]
            else:
                keys.append((None, line))
        return keys
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("clear", "popitem"):
        return [(None, line)]
    return [(_key(call.args[0] if call.args else None), line)]
