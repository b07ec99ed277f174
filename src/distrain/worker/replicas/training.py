"""Training through failures under `distrain run --replicas R` (TorchFT underneath).

R replica groups of N processes: inside a group the ranks are an ordinary process group; across
groups a ``torchft.Manager`` takes the quorum of live groups at every step, all-reduces the
gradients among them and lets a group step only when the quorum commits.  A group whose process
died is restarted alone by its own agent, and copies a live group's state (everything given to
ckpt.restore) over TorchFT's PGTransport.

The quorum is taken synchronously at each step's first forward: a live group sends its state
between two steps, never one a forward pass is changing (BatchNorm's running stats).  Each
group's last committed step goes to its state file in DISTRAIN_FT_EVENTS (``group.G``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader

from distrain.coordination.replica_marks import open_step, write_step
from distrain.errors import DistrainError
from distrain.events import emit
from distrain.log import get_logger
from distrain.parallel.options import Strategy
from distrain.worker.replicas import rejoin, sync
from distrain.worker.replicas.bind import manager_server_on
from distrain.worker.replicas.midstep import move_loader
from distrain.worker.replicas.noise import first_forward_filtered, quiet_sequence_numbers

if TYPE_CHECKING:
    from distrain.checkpoint import Resumed
    from distrain.process.info import ProcessInfo
    from distrain.settings import Settings

_log = get_logger("train")

#: a quorum or commit wait this long (seconds) after a stop signal waits for a dead peer
STUCK_S = 1.0


class Replicas:
    """This process's replica group and its ``torchft.Manager``; what Context delegates to."""

    def __init__(self, process: ProcessInfo, settings: Settings, precision: str) -> None:
        from torchft import Manager, ProcessGroupGloo, ProcessGroupNCCL
        from torchft.checkpointing.pg_transport import PGTransport

        assert settings.replica_group is not None  # attach() makes one only under --replicas
        group, self.groups = settings.replica_group, settings.replica_groups or 1
        self.group, self.events = group, settings.ft_events
        self.rank, self.size = process.rank, process.world_size
        self.precision = precision
        self.map_buffers = settings.map_large_buffers  # the opt-in allocator setting (heap.py)
        self.objects: dict[str, Any] = {}
        self.started = False
        self.quorum_open = False  # a quorum for the coming step was taken (ctx.step closes it)
        self.source: int | None = None  # the group this process healed from
        self.claimed_step: int | None = None  # its state's step while asking as if behind
        self.waiting_since: float | None = None  # in a quorum or commit vote since (monotonic)
        self.in_step = False  # between a step's first forward and its commit vote
        self.applying = False  # in a committed step's update: the optimizer's own step passes
        self._covered: set[int] | None = None  # ids of the prepared models' parameters
        self.met_all_at: int | None = None  # step of the last quorums that held every group
        self.met_all_times = 0  # how many quorums in a row held every group at that step
        # each loader's position at the last step end: what a peer copies while a batch is in flight
        self._positions: dict[str, Any] = {}
        #: at the last commit: what a checkpoint saves (a stop can fall between a batch one group
        #: consumed uncommitted and another never drew: resumed from disk, their loaders differed)
        self.committed_positions: dict[str, Any] = {}
        self._device = process.device
        cuda = process.device.type == "cuda" and process.backend == "nccl"
        # cross-group collectives and heals (DISTRAIN_FT_TIMEOUT): short, a dead group costs
        # little; gloo's own timeout (survivors' wait on a dead peer) half of it
        ft_timeout = dt.timedelta(seconds=settings.ft_timeout_s)
        self.quorum_timeout_s, self.start_wait_s = (
            settings.ft_quorum_timeout_s,
            settings.ft_start_wait_s,
        )
        self.linger_s = settings.ft_linger_s
        # this agent's restarts (in the events); the lighthouse named when a quorum fails
        self.restart_count, self.lighthouse = settings.restart_count, settings.lighthouse
        pg = (
            ProcessGroupNCCL(timeout=ft_timeout)
            if cuda
            else ProcessGroupGloo(timeout=ft_timeout / 2)
        )
        self._pg = pg
        transport = PGTransport(pg, timeout=ft_timeout, device=process.device)
        host = settings.ft_host or settings.bind_addr or "127.0.0.1"
        with sync.real_accelerator(settings.cpu_rehearsal is not None), manager_server_on(host):
            self.manager = Manager(
                pg=pg,
                load_state_dict=self._load,
                state_dict=self._state,
                min_replica_size=1,
                use_async_quorum=False,
                timeout=ft_timeout,
                quorum_timeout=dt.timedelta(seconds=self.quorum_timeout_s),
                connect_timeout=dt.timedelta(seconds=10),
                rank=process.rank,
                world_size=process.world_size,
                replica_id=f"distrain_{group}",
                hostname=host,
                checkpoint_transport=transport,
            )
        self._step_fd: int | None = None
        if self.events and process.rank == 0:
            self._step_fd = open_step(self.events, group)

    # -- what is healed --------------------------------------------------------------------
    def register(self, name: str, obj: Any) -> None:
        """Include `obj` (state_dict/load_state_dict) in the state a replacement copies."""
        for key, old in list(self.objects.items()):
            if old is obj:
                del self.objects[key]
        self.objects[name] = obj

    def _state(self) -> dict[str, Any]:
        # at a step's first forward the position counts the batch just drawn, not yet trained on:
        # a peer copying it skipped a batch (and took the last step alone); send the step start's
        def state_of(name: str, obj: Any) -> Any:
            if self.in_step and name in self._positions:
                return self._positions[name]
            return sync.plain(obj).state_dict()

        return {
            "group": self.group,
            "step": rejoin.sent_step(self),
            "objects": {name: state_of(name, obj) for name, obj in self.objects.items()},
        }

    def _load(self, state: dict[str, Any]) -> None:
        self.source = int(state["group"])
        rejoin.take_sent_step(self, state)
        missing = [name for name in self.objects if name not in state["objects"]]
        if missing:
            raise RuntimeError(
                f"group {self.source} sent no state for {', '.join(missing)} "
                "(scripts must register the same objects)"
            )
        for name, obj in self.objects.items():
            sent = state["objects"][name]
            if self.in_step and isinstance(obj, DataLoader):  # the script's loop has begun
                move_loader((self.group, self.source), self._positions, name, obj, sent)
                continue
            sync.plain(obj).load_state_dict(sent)

    def _mark_positions(self) -> None:
        for name, obj in self.objects.items():
            if isinstance(obj, DataLoader):  # our loaders
                self._positions[name] = obj.state_dict()  # type: ignore[attr-defined]

    def quorum(self) -> None:
        """Take one quorum (synchronous: a copy from a peer ahead is applied before returning)."""
        with self._waiting():
            try:
                self.manager.start_quorum()
            except DistrainError:  # a heal this process refused (_load): its own line
                raise
            except Exception as err:  # TorchFT's own timeout: name what was waited for
                raise sync.quorum_failed(self, err) from None
        if self.size > 1:  # a heal that failed on some ranks only splits the group: restart it
            sync.agree_in_group(self, self._device)
        step, everyone = self.manager.current_step(), self.manager.num_participants() >= self.groups
        self.met_all_times = (
            (self.met_all_times + 1 if step == self.met_all_at else 1) if everyone else 0
        )
        self.met_all_at = step if everyone else None

    # -- model and data --------------------------------------------------------------------
    def prepare_model(self, model: nn.Module, device: torch.device, spec: Strategy) -> nn.Module:
        """`model` prepared for the groups (models.py), healed and stepped with them."""
        from distrain.worker.replicas.models import prepare

        prepared = prepare(self, model, device, spec)
        self.register(f"__model{len(self.objects)}", prepared)
        self._covered = None  # the parameters optimizers are checked against changed
        prepared.register_forward_pre_hook(self._first_forward)
        if isinstance(prepared, nn.parallel.DistributedDataParallel):
            first_forward_filtered(prepared)  # after the quorum's hook: DDP's own warning only
        return prepared

    def covers(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether `optimizer` updates a prepared model's parameters (its steps are the job's)."""
        if self._covered is None:
            self._covered = {
                id(p)
                for obj in self.objects.values()
                if isinstance(obj, nn.Module)
                for p in obj.parameters()
            }
        covered = self._covered
        return any(id(p) in covered for group in optimizer.param_groups for p in group["params"])

    def _adopt_optimizers(self) -> None:
        # a script that never calls ckpt.restore (the README's conversion) still heals its
        # optimizers' state: each one over a prepared model, made before this first quorum, in
        # the order made (the same in every group, so the names match)
        from distrain.worker.replicas.optimizers import made

        known = [id(obj) for obj in self.objects.values()]
        for k, opt in enumerate(made()):
            if id(opt) not in known and self.covers(opt):
                self.objects[f"__optimizer{k}"] = opt

    def _first_forward(self, module: nn.Module, args: Any) -> None:
        # the quorum of a step is taken at its first forward: after the script's own work between
        # two steps (scheduler.step, maybe_save), so a live group sends all of it in one state
        if not self.started:
            self.begin(in_step=True)
        elif not self.quorum_open:
            self.in_step = True  # the script drew this step's batch already
            self.quorum()
            self.quorum_open = True

    def data_rank(self) -> tuple[int, int]:
        """(shard, shards) of the global batch for this process: groups × ranks (asked by
        ``ctx.prepare_loader``, whose batch_size must not come from one group's world_size)."""
        from distrain.worker.replicas.refusal import check_batch_from_world_size

        check_batch_from_world_size(self.groups)
        return self.group * self.size + self.rank, self.groups * self.size

    def checkpoint_dir(self, directory: str) -> str:
        """Each group saves into its own subfolder (a lost group's disk state stays its own)."""
        return os.path.join(directory, f"replica_{self.group}")

    # -- the step ----------------------------------------------------------------------------
    def begin(self, in_step: bool = False, disk_step: int = 0) -> int:
        """The first quorum of this process: heal from a live group if behind (or at
        `disk_step`, the step its own checkpoint restored: rejoin.py); the step reached."""
        self.started = self.quorum_open = True
        self.in_step = in_step
        self._adopt_optimizers()
        t0 = time.perf_counter()
        if self.rank == 0 and self.events and self.groups > 1:
            sync.start_together(self, self.events)
        if not in_step:
            self._mark_positions()
        rejoin.first_quorum(self, self._device, disk_step)
        if self.groups > 1:  # alone, and behind another group's known step: wait for it
            sync.wait_for_further_groups(self, self._device)
        if not in_step:
            self._mark_positions()  # healed: the position it continues from
        self.committed_positions = dict(self._positions)
        step = self.manager.current_step()
        if self.size > 1:
            self._match_group()
        if self.rank == 0 and self.events:
            emit(
                "replica",
                self.events,
                event="joined",
                group=self.group,
                rank=self.rank,
                step=step,
                source=self.source,
                seconds=round(time.perf_counter() - t0, 3),
                attempt=self.restart_count,
            )
        if self.source is not None and step > 0:  # `distrain run` says it from the event above
            (_log.debug if self.events else _log.info)(
                f"distrain: replica group {self.group} healed from group {self.source} at step "
                f"{step}"
            )
        self._write_step(step)
        return step

    def _match_group(self) -> None:
        # TorchFT heals rank r of a group from rank r of a source group it picks per rank: at a
        # job's first quorum groups may differ, so one group's ranks did; DDP needs them equal
        with torch.no_grad():
            for obj in self.objects.values():
                if isinstance(obj, nn.Module):
                    for t in [*obj.parameters(), *obj.buffers()]:
                        # an FSDP shard (a DTensor) is this rank's alone (rank r of every group
                        # heals from one source: the groups still agree); torch's type, not
                        # parallel/fsdp.py's test: a DDP replica worker needs none of FSDP's code
                        if not isinstance(t, DTensor):
                            dist.broadcast(t, src=0)

    def restore(self, objects: dict[str, Any], resumed: Resumed) -> Resumed:
        """After a disk restore: register `objects`, join the quorum, heal if a group is ahead."""
        for name, obj in objects.items():
            self.register(name, obj)
        # from disk: the furthest group leads, a live group at this step too (rejoin.py)
        step = self.begin(disk_step=resumed.step or 0)
        if self.source is not None and step != resumed.step:
            from distrain.checkpoint import Resumed as R

            return R(
                step=step, path=f"replica group {self.source} (live)", extra=dict(resumed.extra)
            )
        return resumed

    def step(self, apply: Callable[[], None]) -> bool:
        """Apply the optimizer step (`apply`) only if the quorum commits; True if state moved on.

        Reached from ``ctx.step(opt)`` and from the optimizer's own ``step`` (optimizers.py);
        inside `apply` the optimizer's step passes through, so a step is voted on once.
        """
        if not self.started:
            self.begin()
        self.quorum_open = False
        with self._waiting():
            committed = self.manager.should_commit()
        if committed:
            self.applying = True  # the optimizer's own step, called by `apply`, is this one
            try:
                apply()
            finally:
                self.applying = False
        self.in_step = False
        self._mark_positions()  # the batch of this step is consumed, committed or not
        if committed:
            self.committed_positions = dict(self._positions)
        self._write_step(self.manager.current_step())
        return bool(committed)

    @contextlib.contextmanager
    def _waiting(self) -> Iterator[None]:
        self.waiting_since = time.monotonic()
        try:
            yield
        finally:
            self.waiting_since = None

    def stuck(self) -> bool:
        """Whether this process waited on its group's peers for a second or more (a stop exits).

        A quorum or commit vote takes milliseconds when every process of the group takes part;
        one that lasts a second after a stop signal waits for a process that died.
        """
        since = self.waiting_since
        return since is not None and time.monotonic() - since >= STUCK_S

    def _write_step(self, step: int) -> None:
        if self._step_fd is not None:
            write_step(self._step_fd, step)

    def close(self) -> None:
        """Serve the groups still to come, leave the final digest, stop the manager (at the end)."""
        from distrain.worker.lifecycle.failure import failing

        try:
            if not failing():  # a failing process's state is no one's to copy (nor to check)
                rejoin.end_run(self, self._device)
        except Exception as err:  # noqa: BLE001 - the launcher's end check then lacks this process
            who = f"replica group {self.group} rank {self.rank}"
            _log.warning(f"distrain: {who}: no end-of-run check ({err})")
        if self._step_fd is not None:
            os.close(self._step_fd)
            self._step_fd = None
        self.manager.shutdown(wait=False)
        # drop the cross-group gloo group now: left to interpreter teardown, its threads meet a
        # half-dismantled process (the exit abort release_ddp describes)
        with contextlib.suppress(Exception):
            self._pg.shutdown()


def attach(process: ProcessInfo, settings: Settings, precision: str) -> Replicas | None:
    """A Replicas for this process when `distrain run --replicas` started it, else None."""
    if settings.replica_group is None or not process.distributed:
        return None
    from distrain.worker.replicas import optimizers

    rejoin.end_if_done(process, settings)  # a replacement of a group whose run was over: no more
    quiet_sequence_numbers()  # TorchFT's process groups: a deprecation at every reconfiguration
    replicas = Replicas(process, settings, precision)
    optimizers.install()  # a process started without the fast start's or the boot's install
    optimizers.join(replicas)  # every optimizer's own step now goes through the commit
    return replicas
