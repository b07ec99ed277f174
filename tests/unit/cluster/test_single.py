"""cluster/single.py: a plain `python train.py` is rank 0 of 1 and forms no process group."""

from __future__ import annotations

import os

import pytest

from distrain.cluster import SingleProcessEnvironment


def test_always_detected() -> None:
    assert SingleProcessEnvironment.detect() is True


def test_is_rank_zero_of_one_without_a_group() -> None:
    env = SingleProcessEnvironment()
    assert (env.rank(), env.world_size(), env.local_rank(), env.local_world_size()) == (0, 1, 0, 1)
    assert (env.node_rank(), env.num_nodes(), env.master_port()) == (0, 1, 0)
    assert env.forms_process_group() is False
    env.validate()


def test_export_env_leaves_master_variables_alone(
    monkeypatch: pytest.MonkeyPatch, writes_environ: None
) -> None:
    SingleProcessEnvironment().export_env()
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"]) == ("0", "1")
    assert "MASTER_ADDR" not in os.environ and "MASTER_PORT" not in os.environ
