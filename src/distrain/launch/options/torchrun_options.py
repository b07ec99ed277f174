"""torchrun's options as torch TORCH_VERSION's ``torch.distributed.run.get_args_parser()``.

`distrain run` splits and checks its command line with these tables instead of torch's parser
before anything else (command_line.parser_without_torch): a typo is refused at once, and the
fan-out (`--hosts`) starts nothing on this machine but ssh.  ``import torch`` (which building
torch's parser needs) took 3.5-6 s on a loaded 2-core machine (benchmarks/launch/RESULTS.md).  The
tables are used only when the installed torch is TORCH_VERSION;
tests/unit/launch/options/test_torchrun_options.py checks them against the installed torch's parser.
Regenerate it with ``python3 -m distrain.launch.options.torchrun_options`` after a torch upgrade.
"""

from __future__ import annotations

#: the torch release (without its local ``+cu…`` part) whose parser this table copies
TORCH_VERSION = "2.14.1"

#: option name -> (its dest, whether it takes a value)
OPTIONS: dict[str, tuple[str, bool]] = {
    "-h": ("help", False),
    "--help": ("help", False),
    "--nnodes": ("nnodes", True),
    "--nproc-per-node": ("nproc_per_node", True),
    "--nproc_per_node": ("nproc_per_node", True),
    "--rdzv-backend": ("rdzv_backend", True),
    "--rdzv_backend": ("rdzv_backend", True),
    "--rdzv-endpoint": ("rdzv_endpoint", True),
    "--rdzv_endpoint": ("rdzv_endpoint", True),
    "--rdzv-id": ("rdzv_id", True),
    "--rdzv_id": ("rdzv_id", True),
    "--rdzv-conf": ("rdzv_conf", True),
    "--rdzv_conf": ("rdzv_conf", True),
    "--standalone": ("standalone", False),
    "--max-restarts": ("max_restarts", True),
    "--max_restarts": ("max_restarts", True),
    "--monitor-interval": ("monitor_interval", True),
    "--monitor_interval": ("monitor_interval", True),
    "--start-method": ("start_method", True),
    "--start_method": ("start_method", True),
    "--event-log-handler": ("event_log_handler", True),
    "--event_log_handler": ("event_log_handler", True),
    "--role": ("role", True),
    "-m": ("module", False),
    "--module": ("module", False),
    "--no-python": ("no_python", False),
    "--no_python": ("no_python", False),
    "--run-path": ("run_path", False),
    "--run_path": ("run_path", False),
    "--log-dir": ("log_dir", True),
    "--log_dir": ("log_dir", True),
    "-r": ("redirects", True),
    "--redirects": ("redirects", True),
    "-t": ("tee", True),
    "--tee": ("tee", True),
    "--log-line-prefix-template": ("log_line_prefix_template", True),
    "--log_line_prefix_template": ("log_line_prefix_template", True),
    "--local-ranks-filter": ("local_ranks_filter", True),
    "--local_ranks_filter": ("local_ranks_filter", True),
    "--duplicate-stdout-filters": ("duplicate_stdout_filters", True),
    "--duplicate_stdout_filters": ("duplicate_stdout_filters", True),
    "--duplicate-stderr-filters": ("duplicate_stderr_filters", True),
    "--duplicate_stderr_filters": ("duplicate_stderr_filters", True),
    "--node-rank": ("node_rank", True),
    "--node_rank": ("node_rank", True),
    "--master-addr": ("master_addr", True),
    "--master_addr": ("master_addr", True),
    "--master-port": ("master_port", True),
    "--master_port": ("master_port", True),
    "--local-addr": ("local_addr", True),
    "--local_addr": ("local_addr", True),
    "--logs-specs": ("logs_specs", True),
    "--logs_specs": ("logs_specs", True),
    "--numa-binding": ("numa_binding", True),
    "--numa_binding": ("numa_binding", True),
    "--signals-to-handle": ("signals_to_handle", True),
    "--signals_to_handle": ("signals_to_handle", True),
    "--shutdown-timeout": ("shutdown_timeout", True),
    "--shutdown_timeout": ("shutdown_timeout", True),
    "--virtual-local-rank": ("virtual_local_rank", False),
    "--virtual_local_rank": ("virtual_local_rank", False),
    "--print-completion": ("print_completion", True),
    "--print_completion": ("print_completion", True),
}

#: dest -> (the type its value is converted to, its choices), for the options whose value
#: torch's parser checks (every other value is a string taken as given)
VALUES: dict[str, tuple[str, tuple[str, ...]]] = {
    "max_restarts": ("int", ()),
    "monitor_interval": ("float", ()),
    "start_method": ("str", ("spawn", "fork", "forkserver")),
    "node_rank": ("int", ()),
    "master_port": ("int", ()),
    "numa_binding": ("str", ("node", "socket", "exclusive", "core-complex")),
    "shutdown_timeout": ("int", ()),
    "print_completion": ("str", ("bash", "zsh", "tcsh")),
}


def _table_now() -> dict[str, tuple[str, bool]]:
    """The installed torch's table (imports torch)."""
    from torch.distributed.run import get_args_parser

    # as command_line.takes_value reads a parser (not imported: that module imports this one)
    return {
        name: (action.dest, action.nargs != 0)
        for action in get_args_parser()._actions
        for name in action.option_strings
    }


def values_now() -> dict[str, tuple[str, tuple[str, ...]]]:
    """The installed torch's VALUES (imports torch)."""
    from torch.distributed.run import get_args_parser

    return {
        action.dest: (
            action.type.__name__ if action.type in (int, float) else "str",
            tuple(action.choices or ()),
        )
        for action in get_args_parser()._actions
        if action.option_strings and (action.type in (int, float) or action.choices)
    }


if __name__ == "__main__":  # prints this module's table for the installed torch
    import torch

    print(f"TORCH_VERSION = {torch.__version__.split('+')[0]!r}")
    print("OPTIONS = {")
    for name, (dest, value) in _table_now().items():
        print(f"    {name!r}: ({dest!r}, {value}),")
    print("}")
    print("VALUES = {")
    for dest, (kind, choices) in values_now().items():
        print(f"    {dest!r}: ({kind!r}, {choices!r}),")
    print("}")
