"""Where a training step's time goes, per rank: data, compute, comm, optimizer, checkpoint, other.

distrain measures it itself, at points it already owns, with no synchronisation in the hot path:

- **data**: time inside the prepared loader's ``__next__`` (``ctx.prepare_loader``);
- **compute**: from the prepared model's forward (a forward pre-hook) to the last gradient its
  backward produced (post-accumulate-grad hooks on its parameters);
- **comm**: from that last gradient until backward returns, which is where DDP waits for the
  all-reduce buckets that were not hidden behind backward.  With ``ctx.backward(loss)`` the end
  is exact; with a plain ``loss.backward()`` it is the next point distrain sees (the optimizer
  step, the next forward or the next batch), so what the script does in between (gradient
  clipping) counts as comm too;
- **optimizer**: ``optimizer.step()`` (torch's global step pre/post hooks);
- **checkpoint**: the time ``Checkpointer.save`` held the loop;
- **other**: the rest of the step's wall time, a step being the time from one optimizer step's
  end to the next: the script's own code, logging, evaluation between epochs.

On CUDA, compute, comm, optimizer and the step's wall time come from CUDA events recorded at the
same points and read one step or more later, once ``query()`` says they are done: the host never
waits for the GPU.  Data and checkpoint are host times.  The first step (warm-up) is not counted.

The API other parts use: :meth:`StepBreakdown.snapshot` (cumulative seconds per phase and the
step count, read by the metrics writer), :meth:`StepBreakdown.summary` (what the launcher's
end-of-job lines are made of) and :func:`~distrain.events.breakdown.breakdown_fractions`.
"""

from __future__ import annotations

import os
import socket
import statistics
from collections import deque
from time import perf_counter, thread_time
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from distrain.events import emit
from distrain.events.breakdown import PHASES, breakdown_fractions

#: per-step compute times kept for the median the straggler rule compares
KEPT_STEPS = 4096
#: CPU time (a system call, ~3 us here) is read in one step of this many: the median needs no more
CPU_SAMPLE_EVERY = 4
#: CUDA steps whose events may wait unread before the oldest are dropped (a GPU far behind)
MAX_PENDING = 64


class _HostClock:
    """Marks are perf_counter() readings."""

    cuda = False

    def mark(self) -> Any:
        return perf_counter()

    def ready(self, mark: Any) -> bool:
        return True

    def seconds(self, start: Any, end: Any) -> float:
        return float(end - start)

    def release(self, marks: list[Any]) -> None:
        pass


class _CudaClock:
    """Marks are CUDA events recorded on the current stream, reused from a pool."""

    cuda = True

    def __init__(self) -> None:
        self._pool: list[Any] = []

    def mark(self) -> Any:
        event = self._pool.pop() if self._pool else torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def ready(self, mark: Any) -> bool:
        return bool(mark.query())

    def seconds(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) / 1000.0

    def release(self, marks: list[Any]) -> None:
        self._pool.extend(marks)


class StepBreakdown:
    """One rank's step breakdown, fed by hooks; read with :meth:`snapshot` and :meth:`summary`."""

    def __init__(
        self, rank: int = 0, world_size: int = 1, cuda: bool = False, job_dir: str | None = None
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        #: the job's folder, whose event stream finish() reports to (DISTRAIN_JOB_DIR)
        self.job_dir = job_dir
        self._clock: Any = _CudaClock() if cuda else _HostClock()
        #: (steps counted, cumulative seconds per phase): replaced whole, so a reader sees one
        #: step's state
        self._totals: tuple[int, dict[str, float]] = (0, dict.fromkeys(PHASES, 0.0))
        self._compute_steps: deque[float] = deque(maxlen=KEPT_STEPS)
        self._wall_steps: deque[float] = deque(maxlen=KEPT_STEPS)
        self._cpu_steps: deque[float] = deque(maxlen=KEPT_STEPS)
        #: the prepared loader's num_workers (the data advice names it)
        self.num_workers: int | None = None
        # the step in progress (training thread only)
        self._spans: list[tuple[str, Any, Any]] = []
        self._data = 0.0
        self._ckpt = 0.0
        self._cpu = 0.0  # CPU only: the training thread's CPU seconds in this step's compute
        self._cpu_on = False  # whether this step reads CPU time (one in CPU_SAMPLE_EVERY)
        self._step_no = 0
        self._cpu_fwd: float | None = None
        self._cpu_grad: float | None = None
        self._fwd: Any = None  # mark of the forward whose backward is awaited
        self._grad: Any = None  # mark of the latest gradient
        self._grads = 0  # gradients seen since that forward
        self._last_param: Any = None  # the parameter whose gradient came last
        self._batch_seen = False  # the prepared loader handed out a batch in this step
        self._forward_from_data = False  # slimmed: compute starts when the batch is handed out
        self._watched: list[
            tuple[Any, dict[int, tuple[torch.nn.Parameter, Any]]]
        ] = []  # (forward hook, gradient hooks)
        self._opt: Any = None  # mark of the optimizer step's start
        self._end: Any = None  # mark of the previous step's end
        self._pending: deque[
            tuple[Any, Any, list[tuple[str, Any, Any]], float, float, float | None]
        ] = deque()
        self._handles: list[Any] = [
            register_optimizer_step_pre_hook(self._on_optimizer_start),
            register_optimizer_step_post_hook(self._on_optimizer_end),
        ]

    # -- hook points (training thread; autograd's thread for gradients) -----------------------
    def watch(self, model: nn.Module) -> None:
        """Time `model`'s forward and backward (the prepared model: wrapper included).

        Hooks go on its forward and on every parameter's gradient for the first step only;
        then :meth:`_slim` keeps the one gradient hook that fired last, and drops the forward
        hook when the prepared loader marks the start of compute instead (a module with a
        forward hook takes torch's slower call path, and each gradient hook is a call from the
        autograd engine into Python: together more than the 1 % budget on small models).
        """
        forward = model.register_forward_pre_hook(self._on_forward)
        grads = {
            id(p): (p, p.register_post_accumulate_grad_hook(self._on_grad))
            for p in model.parameters()
            if p.requires_grad
        }
        self._watched.append((forward, grads))

    def watch_loader(self, loader: Any) -> None:
        """Time the batches of a prepared loader (a DistributedLoader: its ``on_data`` hook)."""
        loader.on_data = self.data
        self.num_workers = loader.num_workers

    def data(self, started: float) -> None:
        """The loader handed out a batch it was asked for at perf_counter() time `started`."""
        now = perf_counter()
        self._data += now - started
        self._batch_seen = True
        if self._grads:  # a plain loss.backward() ended before this batch was asked for
            self._close_backward(started if not self._clock.cuda else self._clock.mark())
        if self._forward_from_data:
            self._fwd = now if not self._clock.cuda else self._clock.mark()
            self._cpu_fwd = thread_time() if self._cpu_on else None

    def backward_done(self) -> None:
        """ctx.backward returned: the exact end of the step's wait for gradient communication."""
        if self._grads:
            self._close_backward(self._clock.mark())

    def checkpoint(self, seconds: float) -> None:
        """A checkpoint save held the training loop for `seconds`."""
        self._ckpt += seconds

    def step_done(self) -> None:
        """An optimizer step of a prepared model ended: close this step, read finished ones."""
        end = self._clock.mark()
        if self._opt is not None:  # the step counter's hook runs before ours: close it here
            self._spans.append(("optimizer", self._opt, end))
            self._opt = None
        if self._grads:
            self._close_backward(end)
        if self._end is not None:
            self._pending.append(
                (
                    self._end,
                    end,
                    self._spans,
                    self._data,
                    self._ckpt,
                    self._cpu if self._cpu_on else None,
                )
            )
            if len(self._pending) > MAX_PENDING:
                self._pending.popleft()  # events never read: the pool makes new ones
        elif self._watched:
            self._slim()
        self._end = end
        self._spans, self._data, self._ckpt, self._cpu = [], 0.0, 0.0, 0.0
        self._step_no += 1
        self._cpu_on = not self._clock.cuda and self._step_no % CPU_SAMPLE_EVERY == 0
        self._resolve()

    def _slim(self) -> None:
        """After the first step: keep only the hooks the next steps need (see :meth:`watch`)."""
        if len(self._watched) != 1 or self._last_param is None:
            return  # several prepared models (a GAN): each backward's last gradient is its own
        forward, grads = self._watched[0]
        if id(self._last_param) not in grads:
            return
        for key, (_, handle) in list(grads.items()):
            if key != id(self._last_param):
                handle.remove()
                del grads[key]
        if self._batch_seen:
            forward.remove()
            self._forward_from_data = True

    def _on_forward(self, module: nn.Module, args: Any) -> None:
        if self._grads:
            self._close_backward(self._clock.mark())
        self._fwd = self._clock.mark()
        if self._cpu_on:
            self._cpu_fwd = thread_time()

    def _on_grad(self, param: torch.Tensor) -> None:
        # every parameter's gradient in the first step, then only the one that came last there
        # (the order is the same from step to step): one mark per backward
        self._grad = self._clock.mark()
        self._grads += 1
        self._last_param = param
        if self._cpu_on:
            self._cpu_grad = thread_time()

    def _on_optimizer_start(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        mark = self._clock.mark()
        if self._grads:
            self._close_backward(mark)
        self._opt = mark

    def _on_optimizer_end(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._opt is not None:
            self._spans.append(("optimizer", self._opt, self._clock.mark()))
            self._opt = None

    def _close_backward(self, end: Any) -> None:
        grad = self._grad if self._grad is not None else end
        if self._fwd is not None:
            self._spans.append(("compute", self._fwd, grad))
        self._spans.append(("comm", grad, end))
        if self._cpu_fwd is not None:
            self._cpu += (
                self._cpu_grad if self._cpu_grad is not None else thread_time()
            ) - self._cpu_fwd
            self._cpu_fwd = self._cpu_grad = None
        self._fwd = self._grad = None
        self._grads = 0

    def _resolve(self) -> None:
        """Account every pending step whose end is known (CPU: at once; CUDA: events done)."""
        clock = self._clock
        while self._pending and clock.ready(self._pending[0][1]):
            start, end, spans, data, ckpt, cpu = self._pending.popleft()
            parts = {
                "data": data,
                "compute": 0.0,
                "comm": 0.0,
                "optimizer": 0.0,
                "checkpoint": ckpt,
            }
            for phase, a, b in spans:
                parts[phase] += max(0.0, clock.seconds(a, b))
            wall = clock.seconds(start, end)
            measured = sum(parts.values())
            parts["other"] = max(0.0, wall - measured)
            steps, totals = self._totals
            self._totals = (steps + 1, {phase: totals[phase] + parts[phase] for phase in PHASES})
            self._compute_steps.append(parts["compute"])
            if cpu is not None:
                self._cpu_steps.append(cpu)
            self._wall_steps.append(max(wall, measured))
            if clock.cuda:  # events back to the pool, each once; the next step starts at `end`
                marks = {id(m): m for _, a, b in spans for m in (a, b)}
                marks[id(start)] = start
                marks.pop(id(end), None)
                clock.release(list(marks.values()))

    # -- readers --------------------------------------------------------------------------
    def snapshot(self) -> tuple[int, dict[str, float]]:
        """(steps counted, cumulative seconds per phase): safe to call from another thread."""
        return self._totals

    def summary(self) -> dict[str, Any]:
        """This rank's figures for the end-of-job lines (see distrain.launch.report.job_summary)."""
        steps, totals = self._totals
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "device": "cuda" if self._clock.cuda else "cpu",
            "steps": steps,
            "seconds": {phase: round(value, 6) for phase, value in totals.items()},
            "fractions": {
                phase: round(value, 6) for phase, value in breakdown_fractions(totals).items()
            },
            # medians, not means: one step preempted by another process must not make a straggler
            "compute_median_s": statistics.median(self._compute_steps)
            if self._compute_steps
            else None,
            "step_median_s": statistics.median(self._wall_steps) if self._wall_steps else None,
            # CPU only: the training thread's CPU time in compute (CPU autograd runs there too),
            # which other processes taking the cores do not stretch, nor gloo's threads polling
            # while they wait (the straggler rule's measure on CPU), read in one step of 4
            "compute_cpu_median_s": statistics.median(self._cpu_steps)
            if self._cpu_steps and not self._clock.cuda
            else None,
            "num_workers": self.num_workers,
        }

    def finish(self) -> None:
        """At shutdown: remove the hooks and report the summary to ``distrain run`` (a
        ``breakdown`` event in the job's stream, distrain/events/)."""
        self.close()
        if self.job_dir and self.snapshot()[0]:
            emit("breakdown", self.job_dir, rank=self.rank, summary=self.summary())

    def close(self) -> None:
        """Remove every hook (the optimizer hooks are global to the process)."""
        for handle in self._handles:
            handle.remove()
        for forward, grads in self._watched:
            forward.remove()
            for _, handle in grads.values():
                handle.remove()
        self._handles.clear()
        self._watched.clear()


def open_breakdown(
    enabled: bool, rank: int, world_size: int, cuda: bool, job_dir: str | None = None
) -> StepBreakdown | None:
    """A StepBreakdown for this rank (CUDA events if `cuda`); None if ``DISTRAIN_BREAKDOWN=0``."""
    if not enabled:
        return None
    return StepBreakdown(rank, world_size, cuda=cuda, job_dir=job_dir)
