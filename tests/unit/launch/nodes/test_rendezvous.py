"""launch/nodes/rendezvous.py: distrain's node-loss timings added to a multi-node c10d --rdzv-conf,
and torchrun's own defaults applied once, in the plan."""

from __future__ import annotations

from distrain.launch.nodes.rendezvous import (
    NODE_LOSS_DEFAULTS,
    Rendezvous,
    node_loss_conf,
    torch_defaults,
)


def test_multi_node_c10d_gets_every_default() -> None:
    conf = node_loss_conf("c10d", 2, "")
    assert dict(item.split("=") for item in conf.split(",")) == NODE_LOSS_DEFAULTS


def test_given_keys_win_and_others_are_kept() -> None:
    assert (
        node_loss_conf("c10d", 4, "keep_alive_interval=5,join_timeout=900")
        == "keep_alive_interval=5,join_timeout=900,keep_alive_max_attempt=3,last_call_timeout=2"
    )


def test_one_node_or_other_backends_are_left_alone() -> None:
    for backend, nodes in (("c10d", 1), ("static", 2), ("etcd", 3)):
        assert node_loss_conf(backend, nodes, "") == ""


def _rdzv(**over: object) -> Rendezvous:
    values: dict[str, object] = dict(backend="static", endpoint="", id="none", conf="", nnodes="1",
                                     node_rank=0, master_addr="127.0.0.1", master_port=None,
                                     local_addr=None)  # fmt: skip
    values.update(over)
    return Rendezvous(**values)  # type: ignore[arg-type]


def test_torch_defaults_are_torchruns() -> None:
    # torch.distributed.run.run(): --standalone and a one-node static job without a port
    # become c10d on localhost:0; the master port defaults to 29500
    for r in (_rdzv(standalone=True, nnodes="2"), _rdzv()):
        done = torch_defaults(r)
        assert (done.backend, done.endpoint, done.standalone, done.master_port) == (
            "c10d",
            "localhost:0",
            False,
            29500,
        )
        assert done.id != "none"
    static = torch_defaults(_rdzv(nnodes="2", master_addr="10.0.0.1"))
    assert (static.backend, static.endpoint, static.master_port) == ("static", "", 29500)
    assert torch_defaults(_rdzv(master_port=1234)).master_port == 1234


def test_on_port_fills_in_only_a_planned_free_port() -> None:
    assert _rdzv(endpoint="127.0.0.1:0").on_port(5000).endpoint == "127.0.0.1:5000"
    assert _rdzv(endpoint="127.0.0.1:29400").on_port(5000).endpoint == "127.0.0.1:29400"
    assert _rdzv().on_port(5000).endpoint == ""
