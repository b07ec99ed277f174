"""launch/rendezvous.py: distrain's node-loss timings added to a multi-node c10d --rdzv-conf."""

from __future__ import annotations

import argparse

from distrain.launch.rendezvous import NODE_LOSS_DEFAULTS, apply_defaults


def _args(backend: str = "c10d", nnodes: str = "2", conf: str = "") -> argparse.Namespace:
    return argparse.Namespace(rdzv_backend=backend, nnodes=nnodes, rdzv_conf=conf)


def test_multi_node_c10d_gets_every_default() -> None:
    args = _args()
    apply_defaults(args)
    assert dict(item.split("=") for item in args.rdzv_conf.split(",")) == NODE_LOSS_DEFAULTS


def test_given_keys_win_and_others_are_kept() -> None:
    args = _args(nnodes="1:4", conf="keep_alive_interval=5,join_timeout=900")
    apply_defaults(args)
    assert (
        args.rdzv_conf
        == "keep_alive_interval=5,join_timeout=900,keep_alive_max_attempt=3,last_call_timeout=2"
    )


def test_one_node_or_other_backends_are_left_alone() -> None:
    for args in (
        _args(nnodes="1"),
        _args(backend="static"),
        _args(backend="etcd", nnodes="3"),
        _args(nnodes="bad"),
    ):
        apply_defaults(args)
        assert args.rdzv_conf == ""
