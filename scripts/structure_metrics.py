"""Count the structure figures that CONTRIBUTING.md's map promises, from the code as it stands.

    python3 scripts/structure_metrics.py            # all figures, one per line
    python3 scripts/structure_metrics.py --no-run   # skip those that start jobs or tools

Figures:
- modules_launcher, modules_fast_start_worker, modules_spawn_worker (modules_replica_worker with
  torchft) and launch_modules_<kind>_worker: the distrain modules in ``sys.modules`` of each
  process of `distrain run -n 1` of a 4-step script at its first step, the launcher's taken
  while its worker is there (scripts/module_census.py says how; tests/jobs/test_module_census.py
  checks the figure against the worker's own dump); launch_code_<kind>_worker: the
  ``distrain.launch*`` modules whose functions the worker keeps alive, in ``sys.modules`` or not
  (a worker forked from a server forked on the launcher's stack keeps that stack's frames);
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
- command_line_scanners: modules of src/distrain whose functions walk a command line themselves,
  found by a leading-dash test on an element of any sequence, whatever its name
  (scripts/code_metrics.py says exactly which tests; `-v` lists each function with its lines);
- feature_words: the words naming an optional feature (hosts, replicas, fast start, rehearsal,
  self-start, dry-run) in the core launcher and worker modules (launch/ and worker/ outside
  their feature folders, and the checkpointer); `-v` gives them per module;
- worker_launcher_channels: the kinds of file the launcher's folders (the job's folder, the
  replica groups' shared folder, the fast start's fallback folder) held during the census jobs,
  listed while they ran; `-v` lists them, and channel_files_named the files the two sides'
  shared modules name (scripts/channel_metrics.py), a check on what the jobs did not show;
- type_ignores: `# type: ignore` comments in src/;
- mypy_errors: errors of `mypy src/distrain` (when mypy is installed);
- format_changes: files `ruff format --check src` would change.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from channel_metrics import worker_launcher_channels
from code_metrics import command_line_scanners, feature_words
from module_census import census

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


def grep_count(pattern: str) -> list[str]:
    """`file:line` of each line in src/distrain matching a regular expression."""
    rx = re.compile(pattern)
    return [
        f"{p.relative_to(SRC).as_posix()}:{n}"
        for p in sorted(PKG.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if rx.search(line)
    ]


def census_figures(verbose: list[str]) -> dict[str, object]:
    """The figures of scripts/module_census.py's jobs: each process's distrain modules at the
    first step, and the channels (the files the launcher's folders held), with their lists."""
    jobs = {"fast_start": (), "spawn": ("--start-method", "spawn")}
    if importlib.util.find_spec("torchft"):
        jobs["replica"] = ("--replicas", "2")
    figures: dict[str, object] = {}
    files: set[str] = set()
    for name, options in jobs.items():
        found = census(*options)
        if name == "fast_start":
            figures["modules_launcher"] = len(found.launcher)
            verbose += [f"launcher module: {m}" for m in found.launcher]
        figures[f"modules_{name}_worker"] = len(found.worker)
        figures[f"launch_modules_{name}_worker"] = sum(
            m.startswith("distrain.launch") for m in found.worker
        )
        # what sys.modules does not show: launcher modules whose code the worker keeps alive
        figures[f"launch_code_{name}_worker"] = len(found.worker_launch_code)
        verbose += [f"{name} worker module: {m}" for m in found.worker]
        verbose += [f"{name} worker keeps launcher code of: {m}" for m in found.worker_launch_code]
        files.update(found.files)
    # a file kind is one channel wherever it lies (events.jsonl in the job's folder and in the
    # replica groups' shared one is one stream)
    figures["worker_launcher_channels"] = len({f.rpartition("/")[2] for f in files})
    verbose += [f"channel (a file the launcher's folders held): {f}" for f in sorted(files)]
    return figures


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
    scanners = command_line_scanners(PKG)
    graph = import_graph()
    channels = worker_launcher_channels(PKG, graph, {module_name(p): p for p in PKG.rglob("*.py")})
    words = feature_words(PKG)
    verbose: list[str] = []
    figures: dict[str, object] = {
        "long_lines": long_lines(),
        "import_cycles": len(cycles),
        "environ_reads": len(env_hits),
        "init_process_group_wrappers": len(wrappers),
        "type_ignores": len(ignores),
        "command_line_scanners": len(scanners),
        "feature_words": sum(sum(c.values()) for c in words.values()),
        "channel_files_named": len(channels),
    }
    if not args.no_run:
        figures.update(census_figures(verbose))
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
            print("  channel named:", channel)
        for module, counts in words.items():
            print("  feature words:", module, counts)
        for line in verbose:
            print(" ", line)
        if not args.no_run:
            for module in path:
                print("  reader path:", module)


if __name__ == "__main__":
    main()
