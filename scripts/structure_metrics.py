"""Count the structure figures that CONTRIBUTING.md's map promises, from the code as it stands.

    python3 scripts/structure_metrics.py            # all figures, one per line
    python3 scripts/structure_metrics.py --no-run   # skip the two that start processes

Figures:
- modules_to_first_step: distrain modules imported by every process of `distrain run -n 2` of a
  one-step script (launcher, fork server, workers), from `-X importtime` (PYTHONPROFILEIMPORTTIME
  is inherited by every child);
- environ_reads: lines that read the environment (`os.getenv`, `os.environ` other than a write:
  setting, deleting or `setdefault`-exporting a variable for torch or a child is no read) in
  src/distrain outside settings.py, contract.py, cluster/ and launch/ (where the environment is the
  input by design) and the ENV_BOUNDARY modules (the fast start's forked child and fork server
  start, the rehearsal's boot sitecustomize, the fresh-interpreter fallback: each says why in a
  comment starting "Environment boundary"), and the ENV_TOOLS tools/doctor/ and tools/bench/
  (launcher-side tools that report or forward the user's environment; their lines naming DISTRAIN_*
  count);
- import_cycles: cycles in the import graph counting `if TYPE_CHECKING:` imports too (the layout
  test leaves those out);
- init_process_group_wrappers: lines that replace `init_process_group`, by assignment or through
  the patching registry (`replace`/`wrap` naming it);
- command_line_scanners: functions in src/distrain that walk a command line themselves, found in
  the AST: a loop or comprehension whose iterable (or a `while` whose test) names something
  called `*argv*`, or a test `"-x" in <something argv>`.  `launch/command_line.split` is one; a
  function that walks the split options (`command.options`) is not, since it reads the one
  splitter's result.  Scanners of other programs' command lines count too (the workers' legacy
  `--local_rank`, the fork server's own command): the figure over-counts rather than hides;
  `-v` lists each;
- worker_launcher_channels: files the worker side and `distrain run` both touch, named in
  contract.py or events.py (scripts/channel_metrics.py says exactly how it counts; `-v` lists
  each with the modules on either side);
- type_ignores: `# type: ignore` comments in src/;
- mypy_errors: errors of `mypy src/distrain` (when mypy is installed);
- format_changes: files `ruff format --check src` would change.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from channel_metrics import worker_launcher_channels

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PKG = SRC / "distrain"
ENV_OWNERS = (
    "distrain/settings.py",
    "distrain/contract.py",
    "distrain/cluster/",
    "distrain/launch/",
)
#: worker-side modules that are by nature the process boundary, each saying why in a comment that
#: starts "Environment boundary": the fast start's forked child (worker/fast_start/forked.py) and
#: the fork server's start (worker/fast_start/preload.py), the rehearsal's boot sitecustomize (it
#: runs before distrain is importable) and the fresh interpreter a forked worker falls back to
ENV_BOUNDARY = (
    "distrain/worker/fast_start/forked.py",
    "distrain/worker/fast_start/preload.py",
    "distrain/worker/rehearse/boot/sitecustomize.py",
    "distrain/worker/fast_start/fresh_child.py",
)
#: launcher-side tools whose job is the user's environment: `distrain doctor` reports it
#: (container markers, CUDA/NVIDIA_VISIBLE_DEVICES, OMP_NUM_THREADS, NCCL's interface variables,
#: COLUMNS) and `distrain bench` forwards it to the jobs it starts; a line of theirs that names a
#: DISTRAIN_* variable or the contract still counts (distrain's own settings go through Settings)
ENV_TOOLS = ("distrain/tools/doctor/", "distrain/tools/bench/")

ONE_STEP = """
import torch, distrain
ctx = distrain.init()
model = ctx.prepare_model(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = ctx.prepare_loader(torch.utils.data.TensorDataset(torch.ones(8, 4)), batch_size=2)
for (x,) in loader:
    ctx.backward(model(x).sum())
    ctx.step(opt)
    break
"""


def module_name(path: Path) -> str:
    """Dotted name of a file under src/."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Every distrain import of every module, lazy and TYPE_CHECKING ones included."""
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                # a package importing its own submodule is how packages load, not a cycle
                if target and target != name and not name.startswith(target + "."):
                    deps.add(target)
        graph[name] = deps
    return graph


def count_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


#: methods of ``os.environ`` that export (set or remove) a variable for torch or a child
_ENV_WRITES = {"setdefault", "pop", "update", "clear", "popitem"}


def _is_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _env_reads(tree: ast.AST) -> list[int]:
    """Lines that read the environment: ``os.getenv``, and ``os.environ`` other than a write."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "getenv"
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            lines.append(node.lineno)
        elif _is_environ(node):
            up = parents.get(node)
            if isinstance(up, ast.Subscript) and isinstance(up.ctx, ast.Store | ast.Del):
                continue  # os.environ[X] = v, del os.environ[X]
            if isinstance(up, ast.Attribute) and up.attr in _ENV_WRITES:
                continue  # os.environ.setdefault(X, v): exported unless the user set it
            lines.append(node.lineno)
    return sorted(set(lines))


def environ_reads() -> list[str]:
    """`file:line` of each environment read outside the modules that own the environment.

    Reads only: an assignment or deletion of ``os.environ[X]`` and the exporting methods
    (``setdefault``, ``pop``, ``update``, ``clear``) hand a variable to torch or a child and are
    not counted; ``X in os.environ``, ``.get``, ``os.environ[X]``, a copy (``dict(os.environ)``,
    ``.copy()``) and ``os.getenv`` are.
    """
    hits = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        text = path.read_text()
        if rel.startswith(ENV_OWNERS):
            continue
        if rel in ENV_BOUNDARY and "# Environment boundary" in text:
            continue  # a boundary module that lost its reason is counted again
        lines = _env_reads(ast.parse(text))
        if rel.startswith(ENV_TOOLS):
            source = text.splitlines()
            lines = [n for n in lines if re.search(r"DISTRAIN_|contract\.", source[n - 1])]
        hits += [f"{rel}:{n}" for n in lines]
    return hits


def _names_argv(node: ast.AST) -> bool:
    return any(
        "argv" in (n.id if isinstance(n, ast.Name) else n.attr)
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    )


def _scans(node: ast.AST) -> bool:
    """A loop over a command line, or an option name looked up in one."""
    if isinstance(node, ast.For | ast.comprehension):
        return _names_argv(node.iter)
    if isinstance(node, ast.While):
        return _names_argv(node.test)
    if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant):
        return (
            str(node.left.value).startswith("-")
            and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
            and any(_names_argv(c) for c in node.comparators)
        )
    return False


def command_line_scanners() -> list[str]:
    """`file:function` of each function that walks a command line itself (see the docstring)."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            inner = {id(n) for d in ast.walk(fn)
                     if d is not fn
                     and isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                     for n in ast.walk(d)}  # fmt: skip
            if any(_scans(n) for n in ast.walk(fn) if id(n) not in inner):
                found.append(f"{path.relative_to(SRC).as_posix()}:{fn.name}")
    return found


def grep_count(pattern: str) -> list[str]:
    """`file:line` of each line in src/distrain matching a regular expression."""
    rx = re.compile(pattern)
    return [
        f"{p.relative_to(SRC).as_posix()}:{n}"
        for p in sorted(PKG.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if rx.search(line)
    ]


def modules_to_first_step() -> int:
    """Distinct distrain modules imported by all processes of a 2-rank one-step job."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp, "one_step.py")
        script.write_text(ONE_STEP)
        env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1", PYTHONPATH=str(SRC))
        cmd = [sys.executable, "-m", "distrain.cli", "run", "-n", "2", str(script)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp)
    if out.returncode:
        raise SystemExit(f"the one-step job failed ({out.returncode}): {out.stderr[-2000:]}")
    return len(set(re.findall(r"\|\s+(distrain(?:\.\w+)*)\s*$", out.stderr, re.M)))


def long_lines(limit: int = 100) -> int:
    """Lines of the repository's Python files longer than the declared line length."""
    files = subprocess.run(
        ["git", "ls-files", "*.py"], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout.split()
    return sum(
        len(line.rstrip("\n")) > limit
        for name in files
        for line in (REPO / name).read_text(encoding="utf-8").splitlines()
    )


def reader_path() -> list[str]:
    """The distrain modules on the stack at each hand-over of the 2-rank one-step job."""
    with tempfile.TemporaryDirectory() as tmp:
        script, out = Path(tmp, "one_step.py"), Path(tmp, "path.txt")
        script.write_text(ONE_STEP)
        env = dict(
            os.environ,
            READER_PATH_OUT=str(out),
            PYTHONPATH=os.pathsep.join([str(REPO / "scripts" / "reader_path"), str(SRC)]),
        )
        cmd = [sys.executable, "-m", "distrain.cli", "run", "-n", "2", str(script)]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp)
        if res.returncode:
            raise SystemExit(f"the one-step job failed ({res.returncode}): {res.stderr[-2000:]}")
        return sorted({m for line in out.read_text().splitlines() for m in line.split()})


def tool_count(cmd: list[str], pattern: str) -> str:
    """Count lines of a tool's output that match; 'n/a' when the tool is missing."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    except FileNotFoundError:
        return "n/a"
    if "No module named" in out.stderr:
        return "n/a"
    return str(len(re.findall(pattern, out.stdout + out.stderr, re.M)))


def main() -> None:
    """Print each figure as `name: value`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-run", action="store_true", help="skip the figures that run tools")
    parser.add_argument("-v", "--verbose", action="store_true", help="list where each one is")
    args = parser.parse_args()
    cycles = count_cycles(import_graph())
    env_hits = environ_reads()
    # an assignment, or a registry call naming it (each line one wrapper, for every module that
    # exports the name)
    wrappers = grep_count(
        r"\binit_process_group\s*=(?!=)|(replace|wrap|patch\w*)\(.*[\"']init_process_group[\"']"
    )
    ignores = grep_count(r"#\s*type:\s*ignore")
    scanners = command_line_scanners()
    graph = import_graph()
    channels = worker_launcher_channels(PKG, graph, {module_name(p): p for p in PKG.rglob("*.py")})
    figures: dict[str, object] = {
        "long_lines": long_lines(),
        "import_cycles": len(cycles),
        "environ_reads": len(env_hits),
        "init_process_group_wrappers": len(wrappers),
        "type_ignores": len(ignores),
        "command_line_scanners": len(scanners),
        "worker_launcher_channels": len(channels),
    }
    if not args.no_run:
        figures["modules_to_first_step"] = modules_to_first_step()
        path = reader_path()
        figures["reader_path_modules"] = len(path)
        figures["mypy_errors"] = tool_count(
            [sys.executable, "-m", "mypy", "src/distrain"], r"^src/.*: error:"
        )
        figures["format_changes"] = tool_count(
            [
                sys.executable,
                "-m",
                "ruff",
                "format",
                "--check",
                "--output-format",
                "concise",
                "src",
            ],
            r"unformatted: File would be reformatted",
        )
    for name, value in figures.items():
        print(f"{name}: {value}")
    if args.verbose:
        for cycle in cycles:
            print("  cycle:", " ".join(cycle))
        for where in env_hits + wrappers + scanners:
            print("  at:", where)
        for channel in channels:
            print("  channel:", channel)
        if not args.no_run:
            for module in path:
                print("  reader path:", module)


if __name__ == "__main__":
    main()
