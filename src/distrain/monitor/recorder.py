"""Per-rank metrics: what ``ctx.log(...)`` feeds.

The training thread only updates a few counters under a lock (well under a microsecond per call: no
I/O, no ``.item()``, one monotonic clock read when the step changes).  A daemon thread wakes every
``interval`` seconds, turns the latest values into one JSON line in
``RUN_DIR/metrics/rank-<R>.jsonl`` (with the process's RSS and, where NVML answers, its GPU's
utilisation and memory) and, on rank 0, into TensorBoard scalars.  Because the heartbeat runs beside
training, a rank whose records stop arriving is frozen or dead, while a rank whose records keep
arriving with the same step is alive but waiting (typically for a frozen peer in a collective).

When ``epoch=`` changes, the finished epoch becomes one ``event: epoch`` record: its training
time (first to last step of the epoch, scaled by steps/(steps-1) to include the first step,
so evaluation after the epoch is not counted), this rank's samples, and the last value of each
scalar logged during or right after it (``loss``, ``accuracy``, ``test_loss``...).
``distrain bench scaling`` reads these records.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from distrain.events.breakdown import breakdown_fractions
from distrain.log import get_logger
from distrain.monitor.probes import GPUProbe, ProcessProbe
from distrain.settings import DEFAULT_METRICS_INTERVAL_S

if TYPE_CHECKING:
    from distrain.monitor.tensorboard import ScalarWriter

_log = get_logger("monitor")

METRICS_SUBDIR = "metrics"
#: values of one name kept between two records (TensorBoard points); the latest always wins
MAX_POINTS = 256
TENSORBOARD_SUBDIR = "tensorboard"


def rank_file(run_dir: str | Path, rank: int) -> Path:
    """Where rank `rank` writes its records."""
    return Path(run_dir) / METRICS_SUBDIR / f"rank-{rank}.jsonl"


def _number(value: Any) -> float | None:
    """A Python float from a number or a one-element tensor (the only place ``.item()`` runs)."""
    try:
        return float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        return None


class Monitor:
    """Records one rank's progress at a bounded rate; TensorBoard scalars on rank 0."""

    def __init__(
        self,
        run_dir: str | Path,
        rank: int,
        world_size: int,
        gpu_index: int | None = None,
        interval: float | None = None,
        tensorboard: bool = True,
        breakdown: Any = None,
        *,
        attempt: int = 0,
        visible_devices: str | None = None,
    ) -> None:
        """`attempt`: the agent's restart count (TORCHELASTIC_RESTART_COUNT), recorded in each row;
        `visible_devices`: CUDA_VISIBLE_DEVICES (both from distrain.settings)."""
        self.run_dir = Path(run_dir)
        self._visible_devices = visible_devices
        self.rank = rank
        self.world_size = world_size
        self.interval = interval if interval is not None else DEFAULT_METRICS_INTERVAL_S
        self._gpu_index = gpu_index
        #: the rank's StepBreakdown (distrain.monitor.breakdown), read by the writer thread
        self._breakdown = breakdown
        self._breakdown_last: tuple[int, dict[str, float]] | None = None
        self._want_tensorboard = tensorboard and rank == 0
        self._lock = threading.Lock()
        # written by the training thread under _lock
        self._step = 0
        self._resumed_step: int | None = None  # resumed_at()'s step: rates count from it
        self._samples = 0
        self._epoch: Any = None
        self._pending: dict[str, list[tuple[int, Any]]] = {}
        self._epoch_now = _EpochTally()
        self._epochs_done: list[dict[str, Any]] = []
        # owned by the writer thread
        self._values: dict[str, float] = {}
        self._last = (0, 0, 0.0)  # step, samples, monotonic time of the previous record
        self._progress_t = time.time()
        self._file: TextIO | None = None
        self._tb: ScalarWriter | None = None
        self._process = ProcessProbe()
        self._gpu: GPUProbe | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self._static = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "rank": rank,
            "world_size": world_size,
            "attempt": attempt,
        }

    # -- training thread ------------------------------------------------------------------
    def log(
        self,
        step: int | None = None,
        epoch: Any = None,
        samples: int | None = None,
        advance: bool = True,
        **scalars: Any,
    ) -> None:
        """Note progress: ``step`` (default: one more than the last, or the same with
        ``advance=False`` for per-epoch values), ``epoch``, ``samples`` processed by this rank
        since the last call, and named scalars (numbers or one-element tensors, converted only
        when a record is written)."""
        for key, value in scalars.items():
            if not hasattr(value, "__float__"):
                raise TypeError(
                    f"ctx.log({key}=...) needs a number or a one-element tensor, got "
                    f"{type(value).__name__}"
                )
        with self._lock:
            before = self._step
            if step is not None:
                self._step = int(step)
            elif advance:
                self._step += 1
            if epoch is not None and epoch != self._epoch:
                if self._epoch is not None:
                    self._epochs_done.append(self._epoch_now.record(self._epoch))
                self._epoch_now = _EpochTally()
                self._epoch = epoch
            if self._step != before:
                self._epoch_now.on_step()
            if samples:
                self._samples += int(samples)
                self._epoch_now.samples += int(samples)
            for key, value in scalars.items():
                self._epoch_now.values[key] = value.detach() if hasattr(value, "detach") else value
                point = (self._step, value.detach() if hasattr(value, "detach") else value)
                points = self._pending.get(key)
                if points is None:
                    self._pending[key] = [point]
                elif len(points) < MAX_POINTS:
                    points.append(point)
                else:  # more calls than TensorBoard needs: keep the first ones and the latest
                    points[-1] = point
        if self._thread is None:
            self._start()

    def resumed_at(self, step: int) -> None:
        """The script resumed at `step` (a checkpoint, or a heal from a live replica group).

        Records nothing by itself; a rank that then ends without a step (a replacement that
        healed at the job's last step) still leaves its end at that step, so `distrain top`
        sees it finished rather than its killed predecessor's last record, stalled.
        """
        with self._lock:
            self._step = self._resumed_step = int(step)

    def _start(self) -> None:
        # when the script first reported progress (its first step): the writer thread's first
        # record can come later (it opens TensorBoard first on rank 0)
        self._static["first_log_t"] = round(time.time(), 3)
        self._open()
        self._thread = threading.Thread(
            target=self._run, name=f"distrain-metrics-{self.rank}", daemon=True
        )
        self._thread.start()

    def _open(self) -> None:
        path = rank_file(self.run_dir, self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # closed in close()
        self._last = (self._resumed_step or 0, 0, time.monotonic())

    # -- writer thread --------------------------------------------------------------------
    def _run(self) -> None:
        # NVML and TensorBoard start here, not in the training thread's first log() call
        self._gpu = GPUProbe(self._gpu_index, self._visible_devices)
        torch = sys.modules.get("torch")
        if self._gpu_index is not None and torch is not None and torch.cuda.is_available():
            # the current GPU is per thread: without this, .item() here could open a CUDA
            # context on GPU 0 in every rank
            torch.cuda.set_device(self._gpu_index)
        if self._want_tensorboard:
            from distrain.monitor.tensorboard import ScalarWriter

            self._tb = ScalarWriter.open(self.run_dir / TENSORBOARD_SUBDIR)
        try:
            self._write("start")
            while not self._stop.wait(self.interval):
                self._write("beat")
        except Exception as err:  # a full disk must not kill training: stop recording
            _log.warning(f"distrain: metrics recording stopped on rank {self.rank}: {err}")

    def _write(self, event: str, **extra: Any) -> None:
        with self._lock:
            step, samples, epoch = self._step, self._samples, self._epoch
            pending, self._pending = self._pending, {}
            if event == "end" and self._epoch is not None and self._epoch_now.steps:
                self._epochs_done.append(self._epoch_now.record(self._epoch))
                self._epoch_now = _EpochTally()
            finished, self._epochs_done = self._epochs_done, []
        now, mono = time.time(), time.monotonic()
        last_step, last_samples, last_mono = self._last
        self._last = (step, samples, mono)
        dt = max(mono - last_mono, 1e-9)
        dsteps, dsamples = step - last_step, samples - last_samples
        if dsteps:
            self._progress_t = now
        points: dict[str, list[tuple[int, float]]] = {}
        for key, raw in pending.items():
            converted = [
                (at, number)
                for at, number in ((at, _number(v)) for at, v in raw)
                if number is not None
            ]
            if converted:
                points[key] = converted
                self._values[key] = converted[-1][1]
        record: dict[str, Any] = {
            "t": round(now, 3),
            "event": event,
            **self._static,
            "step": step,
            "epoch": epoch,
            "samples": samples,
            "steps_per_s": round(dsteps / dt, 4) if event != "start" else None,
            "samples_per_s": round(dsamples / dt, 2) if event != "start" else None,
            "step_time": round(dt / dsteps, 6) if dsteps > 0 and event != "start" else None,
            "progress_t": round(self._progress_t, 3),
            "rss": self._process.rss(),
            "values": self._values,
            **(self._gpu.read() if self._gpu is not None else {}),
            **self._breakdown_fields(),
            **extra,
        }
        assert self._file is not None
        for done in finished:
            values = {
                k: n
                for k, n in ((k, _number(v)) for k, v in done.pop("values").items())
                if n is not None
            }
            line = {"t": round(now, 3), "event": "epoch", **self._static, **done, "values": values}
            self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()
        if self._tb is not None:
            self._tb_write(points, step, dsteps, dsamples, dt, record.get("breakdown"))

    def _breakdown_fields(self) -> dict[str, Any]:
        """``breakdown_s``: cumulative seconds per phase and steps counted; ``breakdown``: the
        fractions over the steps since the previous record (absent when no step finished)."""
        if self._breakdown is None:
            return {}
        steps, totals = self._breakdown.snapshot()
        fields: dict[str, Any] = {
            "breakdown_s": {"steps": steps, **{k: round(v, 6) for k, v in totals.items()}}
        }
        last_steps, last = self._breakdown_last or (0, dict.fromkeys(totals, 0.0))
        if steps > last_steps:
            delta = {phase: totals[phase] - last.get(phase, 0.0) for phase in totals}
            fields["breakdown"] = {k: round(v, 4) for k, v in breakdown_fractions(delta).items()}
        self._breakdown_last = (steps, totals)
        return fields

    def _tb_write(
        self,
        points: dict[str, list[tuple[int, float]]],
        step: int,
        dsteps: int,
        dsamples: int,
        dt: float,
        breakdown: dict[str, float] | None = None,
    ) -> None:
        assert self._tb is not None
        for phase, fraction in (breakdown or {}).items():
            self._tb.scalar(f"breakdown/{phase}", fraction, step)
        for key, series in points.items():
            for at_step, value in series:
                self._tb.scalar(key, value, at_step)
        if dsteps > 0:
            self._tb.scalar("throughput/steps_per_s", dsteps / dt, step)
            if dsamples > 0:
                # ranks take equal shares of the global batch: the job's rate is rank 0's × world
                self._tb.scalar("throughput/samples_per_s", dsamples / dt * self.world_size, step)
        self._tb.flush()

    # -- end ------------------------------------------------------------------------------
    def close(self) -> None:
        """Write the final record (``event: end``), flush TensorBoard, release NVML (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            if (
                self._resumed_step is not None
            ):  # resumed, never stepped: the end, written here (no thread to race)
                self._open()
                with contextlib.suppress(Exception):
                    self._write("end")
                if self._file is not None:
                    self._file.close()
            return
        self._stop.set()
        # the loop ends at once; only a first start-up (importing tensorboard) can take long
        self._thread.join(timeout=60)
        error = getattr(sys, "last_value", None)  # set when an uncaught exception ended the script
        if not self._thread.is_alive():  # never write concurrently with the thread
            with contextlib.suppress(Exception):
                self._write("end", **({"error": type(error).__name__} if error is not None else {}))
        if self._tb is not None:
            self._tb.close()
        if self._gpu is not None:
            self._gpu.close()
        if self._file is not None:
            self._file.close()


class _EpochTally:
    """One epoch as the training thread sees it: step times, samples, the latest scalars."""

    def __init__(self) -> None:
        self.first_t: float | None = None
        self.last_t = 0.0
        self.steps = 0
        self.samples = 0
        self.values: dict[str, Any] = {}

    def on_step(self) -> None:
        now = time.monotonic()
        if self.first_t is None:
            self.first_t = now
        self.last_t = now
        self.steps += 1

    def record(self, epoch: Any) -> dict[str, Any]:
        """The epoch's summary (values still raw: converted by the writer thread)."""
        seconds = None
        if self.first_t is not None and self.steps > 1:
            seconds = (self.last_t - self.first_t) * self.steps / (self.steps - 1)
        return {
            "epoch": epoch,
            "epoch_steps": self.steps,
            "epoch_samples": self.samples,
            "epoch_seconds": round(seconds, 6) if seconds is not None else None,
            "values": dict(self.values),
        }
