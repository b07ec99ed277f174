"""The package imports and the CLI answers."""

from helpers import python, run


def test_version_and_help() -> None:
    res = run([python(), "-m", "distrain.cli", "--version"], timeout=60, check=True)
    assert res.stdout.startswith("distrain ")
    res = run([python(), "-m", "distrain.cli", "run", "--help"], timeout=60, check=True)
    assert "--nproc" in res.stdout and "--legacy-local-rank" in res.stdout
