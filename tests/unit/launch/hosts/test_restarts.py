"""launch/hosts/restarts.py: the hosts' restart lines folded into one per attempt."""

from __future__ import annotations

import threading

from distrain.launch.hosts.restarts import RestartLines, first_ranks

H0 = ("distrain run: local rank 0 (pid 23463) exited with code 1; restarting this node's ranks "
      "(attempt 1 of 3), resuming from step 8")  # fmt: skip
H1 = ("distrain run: local rank 1 (pid 23460) was killed by SIGKILL; restarting this node's "
      "ranks (attempt 1 of 3)")  # fmt: skip


def test_one_line_per_attempt_naming_the_killed_host_and_the_resume_step() -> None:
    said: list[str] = []
    fold = RestartLines(2, said.append)
    assert fold.take("h0", H0, root_cause=False) and said == []  # waits for h1
    assert fold.take("h1", H1, root_cause=False)
    assert said == [
        "local rank 1 of host h1 (pid 23460) was killed by SIGKILL; restarting every host's ranks "
        "(attempt 1 of 3), resuming from step 8"
    ]
    assert not fold.take("h0", "distrain run: node 0/2 · interface eth0", root_cause=False)
    # the window's timer ended with the last host's line (a leaked thread under load otherwise)
    assert not [t for t in threading.enumerate() if isinstance(t, threading.Timer)]


def test_the_root_causes_host_is_named_when_nobody_was_killed() -> None:
    said: list[str] = []
    fold = RestartLines(2, said.append)
    raised = H1.replace("was killed by SIGKILL", "exited with code 1")
    fold.take("h0", H0, root_cause=False)
    fold.take("h1", raised, root_cause=True)
    assert said[0].startswith("local rank 1 of host h1 (pid 23460) exited with code 1; restarting")


def test_the_global_rank_when_every_hosts_count_is_known() -> None:
    said: list[str] = []
    assert first_ranks(["h0", "h1"], [2, None]) == {}
    fold = RestartLines(2, said.append, first_ranks(["h0", "h1"], [2, 2]))
    fold.take("h1", H1, root_cause=False)
    fold.take("h0", H0, root_cause=False)
    assert said[0].startswith("rank 3 (host h1, local rank 1, pid 23460) was killed by SIGKILL")
