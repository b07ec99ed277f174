"""`distrain run --hosts`: one command on one machine starts a job on several, over real ssh.

Each host is a network namespace running a real sshd (root login by key only); the command runs
in a further namespace, the launching machine (helpers/ssh_cluster.py).  Checked: the result is
bit for bit the two-command form's, a host that cannot be used stops the job in one line, a
killed ssh session is a node loss (elastic: the job goes on; static: it stops naming the host),
and Ctrl-C leaves no process on any host.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import torch
from helpers import REPO, kill_group, python
from helpers.ssh_cluster import (
    CLEAN_BOUND_S,
    SshCluster,
    assert_clean as _assert_clean,
    ssh_cluster,
    ssh_of as _ssh_of,
    start_job as _start,
    until as _until,
    wait_job as _wait,
)

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]

RUN = [python(), "-m", "distrain.cli", "run"]
CKPT = str(REPO / "tests" / "scripts" / "ckpt_worker.py")
LONG = str(REPO / "tests" / "scripts" / "node_loss_worker.py")
MONITOR = str(REPO / "tests" / "scripts" / "monitor_job.py")  # logs with ctx.log every step


@pytest.fixture
def cluster2(tmp_path: Path) -> Iterator[SshCluster]:
    """Two ssh hosts and a launching machine."""
    with ssh_cluster(2, tmp_path) as made:
        yield made


def _until_both_ranks_report(run_dir: Path, proc: subprocess.Popen[str], log: Path) -> None:
    """Both nodes' ranks write into the one run directory `distrain top` reads."""
    _until(
        lambda: (
            {p.name for p in (run_dir / "metrics").glob("rank-*.jsonl")}
            >= {"rank-0.jsonl", "rank-1.jsonl"}
        ),
        proc,
        log,
    )


@pytest.mark.slow
def test_one_command_equals_two_commands(cluster2: SshCluster, tmp_path: Path) -> None:
    c, args = cluster2, ["--epochs", "2", "--global-batch", "12", "--samples", "96"]
    one, log = tmp_path / "one.pt", tmp_path / "one.log"
    proc = _start(
        c,
        RUN
        + [
            "--hosts",
            "h0:1,h1:1",
            *c.ssh_opts,
            "-x",
            "OMP_NUM_THREADS",
            CKPT,
            *args,
            "--out",
            str(one),
        ],
        log,
    )
    code = _wait(proc, log, 200)
    text = log.read_text()
    assert code == 0, text[-4000:]
    assert f"distrain run: 2 hosts (h0, h1), static; master h0 at {c.hosts.addrs[0]}:" in text, (
        text[-3000:]
    )
    assert "[h0] finished at step 16" in text and "[h1] distrain run: node 1/2" in text, text[
        -3000:
    ]
    assert "distrain run: job finished on 2 of 2 host(s)" in text
    _assert_clean(c)
    # the same job typed on each host by hand
    two, port = tmp_path / "two.pt", "29517"
    flags = ["--nnodes", "2", "--master-addr", c.hosts.addrs[0], "--master-port", port, "-n", "1"]
    logs = [tmp_path / f"node{i}.log" for i in range(2)]
    procs = [
        c.hosts.start(
            i, RUN + flags + ["--node-rank", str(i), CKPT, *args, "--out", str(two)], logs[i]
        )
        for i in range(2)
    ]
    assert c.hosts.wait(procs, 200, logs) == [0, 0]
    a, b = torch.load(one, weights_only=True), torch.load(two, weights_only=True)
    assert a["step"] == b["step"] == 16
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_a_host_that_cannot_be_used_stops_the_job_in_one_line(
    cluster2: SshCluster, tmp_path: Path
) -> None:
    c = cluster2
    # before `Host *` (ssh keeps the first value): a host nobody listens on, and a login the key
    # does not open, so that sshd asks for a password (which BatchMode never gives)
    extra = (f"Host hdown\n  HostName {c.hosts.addrs[1]}\n  Port 2299\n"
             f"Host hpw\n  HostName {c.hosts.addrs[1]}\n  User nosuchuser\n")  # fmt: skip
    c.config.write_text(extra + c.config.read_text())
    cases = {
        "h0:1,hdown:1": "distrain run: error: host hdown: ssh: connect to host",
        "h0:1,hpw:1": "distrain run: error: host hpw: nosuchuser@",
        "h0:1,nosuch.invalid:1": "distrain run: error: unknown host nosuch.invalid",
    }
    for hosts, message in cases.items():
        start = time.monotonic()
        res = subprocess.run(c.launch_cmd(RUN + ["--hosts", hosts, *c.ssh_opts, CKPT, "--out",
                                                 str(tmp_path / "never.pt")]),
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith(message), (
            hosts,
            res.stderr,
        )
        assert time.monotonic() - start < 60
        if hosts.startswith("h0:1,hpw"):
            assert (
                "Permission denied (publickey,password" in res.stderr
                and "BatchMode=yes" in res.stderr
            ), res.stderr
    # another torch on the hosts (a stand-in package first on their PYTHONPATH), and a master port
    # in use
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ImportError('a stand-in: never imported by the check')\n"
    )
    (fake / "version.py").write_text("__version__ = '1.0.0'\ncuda = None\n")
    path = f"{fake.parent}:{os.environ['PYTHONPATH']}"
    listener = c.hosts.start(0,
                             [python(), "-c",
                              "import socket,time; s=socket.socket(); s.bind(('0.0.0.0', 29533)); "
                              "s.listen(); time.sleep(600)"],
                             tmp_path / "listener.log")  # fmt: skip
    deadline = time.monotonic() + 60
    while (
        "29533"
        not in subprocess.run(
            ["ip", "netns", "exec", c.hosts.names[0], "ss", "-ltn"], capture_output=True, text=True
        ).stdout
    ):
        assert time.monotonic() < deadline and listener.poll() is None
        time.sleep(0.1)
    for flags, message in [
        (["-x", f"PYTHONPATH={path}"], "distrain run: error: host h0: torch 1.0.0 there, "),
        (
            ["--master-port", "29533"],
            "distrain run: error: host h0: master port 29533 is already in use there",
        ),
    ]:
        res = subprocess.run(c.launch_cmd(RUN + ["--hosts", "h0:1,h1:1", *c.ssh_opts, *flags, CKPT,
                                                 "--out", str(tmp_path / "never.pt")]),
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert (
            res.returncode == 2 and res.stderr.count("\n") == 1 and res.stderr.startswith(message)
        ), res.stderr
    kill_group(listener)
    assert not (tmp_path / "never.pt").exists()  # no case started the job
    _assert_clean(c)


def test_sigkill_of_a_static_hosts_session_stops_the_job_naming_it(
    cluster2: SshCluster, tmp_path: Path
) -> None:
    c, log, ckpt = cluster2, tmp_path / "job.log", tmp_path / "ckpt"
    argv = RUN + [
        "--hosts",
        "h0:1,h1:1",
        *c.ssh_opts,
        "-x",
        f"BENCH_FIRST_STEP_FILE={tmp_path / 'steps'}",
        LONG,
        "--dir",
        str(ckpt),
        "--sleep",
        "0.1",
    ]
    proc = _start(c, argv, log)
    _until(lambda: list(ckpt.glob("step_*")), proc, log)
    _ssh_of(proc, "h1").kill()
    code = _wait(proc, log, 120)
    lines = log.read_text().splitlines()
    # h0 is left to say its own verdict (hosts/run.py _settle): it saved before the kill, so the
    # line ends with its resume hint
    assert code != 0 and lines[-1].startswith(
        "distrain run: job failed: host h1: its ssh session was killed (SIGKILL); rerun the same "
        "command"
    ), lines[-20:]
    assert " to resume from step " in lines[-1], lines[-20:]
    _assert_clean(c)


@pytest.mark.slow
def test_elastic_job_goes_on_when_a_hosts_session_dies(tmp_path: Path) -> None:
    with ssh_cluster(3, tmp_path) as c:
        log, ckpt = tmp_path / "job.log", tmp_path / "ckpt"
        # a global batch of 12 divides among 3, 2 and 1 ranks: the same steps whatever is left
        argv = RUN + ["--hosts", "h0:1,h1:1,h2:1", "--nnodes", "1:3", *c.ssh_opts, CKPT, "--dir",
                      str(ckpt), "--every", "4",
                      "--global-batch", "12", "--samples", "96", "--epochs", "5", "--step-sleep",
                      "0.1", "--out", str(tmp_path / "out.pt")]  # fmt: skip
        proc = _start(c, argv, log)
        _until(lambda: list(ckpt.glob("step_*")), proc, log)
        _ssh_of(proc, "h2").kill()
        assert not c.wait_clean(CLEAN_BOUND_S) or not c.pids(2), c.describe(
            2
        )  # h2's watcher stopped its node
        code = _wait(proc, log, 240)
        text = log.read_text()
        assert code == 0, text[-4000:]
        assert (
            "distrain run: host h2 lost: its ssh session was killed (SIGKILL); the job goes "
            "on with 2 host(s)" in text
        )
        assert "[h0] finished at step 40" in text, text[-4000:]
        assert text.rstrip().endswith("distrain run: job finished on 2 of 3 host(s); lost: h2")
        _assert_clean(c)


def test_ctrl_c_stops_every_host(cluster2: SshCluster, tmp_path: Path) -> None:
    c, log, run_dir = cluster2, tmp_path / "job.log", tmp_path / "run"
    argv = RUN + [
        "--hosts",
        "h0:1,h1:1",
        "--quiet-hosts",
        *c.ssh_opts,
        "--run-dir",
        str(run_dir),
        MONITOR,
        "--seconds",
        "600",
    ]
    proc = _start(c, argv, log)
    # both nodes' ranks write into the one run directory `distrain top` reads
    _until_both_ranks_report(run_dir, proc, log)
    assert all(c.pids(i) for i in range(2))  # the job runs on both hosts
    stopped = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code = _wait(proc, log, 60)
    assert code == 130, log.read_text()[-3000:]
    assert (
        "[h0] distrain run: node 0/2" in log.read_text() and "[h1]" not in log.read_text()
    )  # --quiet-hosts
    # torch's agent's "Received 15 death signal, shutting down workers": the stop is ours to say
    assert "death signal" not in log.read_text(), log.read_text()[-3000:]
    assert (
        log.read_text()
        .rstrip()
        .splitlines()[-1]
        .startswith("distrain run: stopped by SIGINT: every host's processes were stopped")
    )
    _assert_clean(c)
    assert time.monotonic() - stopped < CLEAN_BOUND_S + 5


def test_a_killed_launcher_leaves_nothing_on_the_hosts(
    cluster2: SshCluster, tmp_path: Path
) -> None:
    """SIGKILL of the launching process itself: its ssh clients read EOF on their stdin, pass it on,
    and every host's watcher stops its node (the same path as Ctrl-C, with nobody left to wait)."""
    c, log, run_dir = cluster2, tmp_path / "job.log", tmp_path / "run"
    proc = _start(
        c,
        RUN
        + [
            "--hosts",
            "h0:1,h1:1",
            *c.ssh_opts,
            "--run-dir",
            str(run_dir),
            MONITOR,
            "--seconds",
            "600",
        ],
        log,
    )
    _until_both_ranks_report(run_dir, proc, log)
    launcher = psutil.Process(proc.pid)  # `ip netns exec` became the launcher itself
    assert "distrain.cli" in launcher.cmdline()
    clients = [p for p in launcher.children() if p.name() == "ssh"]
    assert len(clients) == 2
    launcher.kill()
    _assert_clean(c)
    _, alive = psutil.wait_procs(clients, timeout=CLEAN_BOUND_S)
    assert not alive, f"ssh clients left on the launching machine: {alive}"


def test_doctor_checks_every_host(cluster2: SshCluster) -> None:
    c = cluster2
    argv = [
        python(),
        "-m",
        "distrain.cli",
        "doctor",
        "--hosts",
        "h0,h1",
        "--ssh-opts",
        f"-F {c.config}",
        "--bandwidth-bytes",
        "1M",
    ]
    res = subprocess.run(c.launch_cmd(argv), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0 and "distrain run: 2 hosts (h0, h1), static" in res.stderr, (
        res.stderr[-3000:]
    )
    assert "[h1]" not in res.stdout + res.stderr  # only rank 0's host speaks
    # the all-ranks checks ran across both hosts, over the hosts' link
    assert (
        "2/2 ranks" in res.stdout
        and f"node 0 ({socket.gethostname()}, {c.hosts.addrs[0]}) <-> node 1" in res.stdout
    ), res.stdout[-3000:]
    _assert_clean(c)


def test_c10ds_reverse_dns_warning_is_kept_off_the_console(
    cluster2: SshCluster, tmp_path: Path
) -> None:
    """TCPStore warns on every host whose clients have no reverse DNS (4× per job): the fan-out
    drops that known line (distrain/noise.py KNOWN_CPP) and no other.  The script writes it to
    fd 2 as torch's C++ does, since these namespaces resolve their peers."""
    script = tmp_path / "warns.py"
    script.write_text(
        "import os\n"
        "os.write(2, b'[W1128 20:59:25.951000 7 torch/csrc/distributed/c10d/socket.cpp:474] "
        "[c10d] The hostname of the client socket cannot be retrieved. err=-3\\n')\n"
        "os.write(2, b'[c10d] a line nobody knows\\n')\n"
    )
    log = tmp_path / "job.log"
    proc = _start(cluster2, RUN + ["--hosts", "h0:1,h1:1", *cluster2.ssh_opts, str(script)], log)
    assert _wait(proc, log, 200) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "[h0] [c10d] a line nobody knows" in text and "[h1] [c10d] a line nobody" in text, text
    assert "hostname of the client socket" not in text, text


def test_a_failed_script_ends_with_one_line_naming_its_host(
    cluster2: SshCluster, tmp_path: Path
) -> None:
    """Rank 1 (host h1) raises after a checkpoint at step 8: the last line names h1 and the cause
    once, not nested in h0's, and ends with the resume hint (which h0, rank 0's host, holds); the
    survivor's line says what its peer's loss means, not gloo's C++ path."""
    log = tmp_path / "job.log"
    argv = RUN + ["--hosts", "h0:1,h1:1", *cluster2.ssh_opts, CKPT, "--dir", str(tmp_path / "c"),
                  "--every", "4", "--raise-at", "10", "--out", str(tmp_path / "m.pt")]  # fmt: skip
    assert _wait(_start(cluster2, argv, log), log, 200) == 1
    lines = log.read_text().rstrip().splitlines()
    assert lines[-1].startswith("distrain run: job failed: host h1: rank 1 (pid ") and lines[
        -1
    ].endswith(
        "exited with code 1: ValueError: injected failure on rank 1; rerun the same command to "
        f"resume from step 8 ({tmp_path / 'c' / 'step_00000008'})"
    ), lines[-3:]
    assert not [ln for ln in lines if ln.startswith(("[h0] distrain run: job failed", "[h1] dis"
                                                     "train run: job failed"))]  # fmt: skip
    survivor = next(ln for ln in lines if "another rank failed" in ln)
    assert survivor.startswith("[h0] distrain: rank 0 stopped: another rank failed (") and (
        "pair.cc" not in survivor and "that process ended" in survivor
    ), survivor
    _assert_clean(cluster2)


def test_a_restart_is_one_line_for_the_job(cluster2: SshCluster, tmp_path: Path) -> None:
    """Rank 1 (h1) is SIGKILLed at step 10 after a checkpoint at 8: one restart line, naming h1
    and the step both hosts resume from, instead of each node's own (h0's blaming its rank)."""
    log = tmp_path / "job.log"
    argv = RUN + ["--hosts", "h0:1,h1:1", *cluster2.ssh_opts, "--max-restarts", "1", CKPT, "--dir",
                  str(tmp_path / "c"), "--every", "4", "--kill-at", "10", "--out",
                  str(tmp_path / "m.pt")]  # fmt: skip
    assert _wait(_start(cluster2, argv, log), log, 240) == 0, log.read_text()[-3000:]
    text = log.read_text()
    restarts = [ln for ln in text.splitlines() if "restarting" in ln]
    assert restarts == [
        f"distrain run: rank 1 (host h1, local rank 0, pid "
        f"{restarts[0].split(', pid ')[1].split(')')[0]}) was "
        "killed by SIGKILL; restarting every host's ranks (attempt 1 of 1), resuming from step 8"
    ], text[-3000:]
    assert "[h0] finished at step 16" in text
