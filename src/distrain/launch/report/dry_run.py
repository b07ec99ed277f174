"""``--dry-run`` behind the launcher's seam (launch/seam.py): the planned job is printed, not run.

It takes the job over once planned: the network line a node would print, then the command that
runs the job (the equivalent ``torchrun`` command with the environment distrain adds, or the
``--launcher`` command line).  The fan-out to hosts and the replica groups print their own
commands (launch/hosts/run.py, launch/replicas/groups.py), before this feature's turn.
"""

from __future__ import annotations

import shlex

from distrain.launch.command_line import any_option
from distrain.launch.launch_plan import LaunchPlan
from distrain.launch.report.start_lines import say_network
from distrain.launch.seam import Feature


class DryRun(Feature):
    """Print what would run instead of running it."""

    def take_over(self, launch: LaunchPlan) -> int | None:
        """The network line, then the command: the job ends here, successfully."""
        say_network(launch)
        if launch.args.launcher != "torchrun":
            from distrain.launch.mpi import command_for

            print(shlex.join(command_for(launch.args, launch.env)))
            return 0
        env_line = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(launch.env.items()))
        print(env_line + (" " if env_line else "") + shlex.join(torchrun_command(launch)))
        return 0


def torchrun_command(launch: LaunchPlan) -> list[str]:
    """The `torchrun` command line equivalent to `launch`."""
    a = launch.args
    cmd = ["torchrun", "--nnodes", str(a.nnodes), "--nproc-per-node", str(a.nproc_per_node)]
    if a.rdzv_backend != "static" or a.rdzv_endpoint:
        cmd += [
            "--rdzv-backend",
            a.rdzv_backend,
            "--rdzv-endpoint",
            a.rdzv_endpoint,
            "--rdzv-id",
            a.rdzv_id,
        ]
        if a.rdzv_conf:
            cmd += ["--rdzv-conf", a.rdzv_conf]
    else:
        cmd += ["--node-rank", str(a.node_rank), "--master-addr", a.master_addr]
        if a.master_port is not None:
            cmd += ["--master-port", str(a.master_port)]
    if a.standalone:
        cmd.append("--standalone")
    if int(a.max_restarts):
        cmd += ["--max-restarts", str(a.max_restarts)]
    if a.log_dir:
        cmd += ["--log-dir", a.log_dir]
    if a.local_addr:
        cmd += ["--local-addr", a.local_addr]
    if a.module:
        cmd.append("-m")
    if a.no_python:
        cmd.append("--no-python")
    cmd.append(a.training_script)
    # torchrun itself needs "--" to stop prefix-matching script options
    script_args = list(a.training_script_args)
    if any_option(script_args):
        cmd.append("--")
    return cmd + script_args


def feature(name: str) -> Feature:
    """The dry run's hook (launch/seam.py)."""
    return DryRun()
