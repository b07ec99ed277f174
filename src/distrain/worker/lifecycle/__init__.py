"""A worker's decisions to exit, and what it says when it does.

The watchdog (:mod:`.watchdog`, with :mod:`.hang_diagnosis` naming the rank a hang is about),
the uncaught-error hook (:mod:`.failure`, which also says a peer's failure in words),
the stop of a job that every restart would fail the same way (:mod:`.stop_job`) and the stack
dump on ``SIGUSR1`` (:mod:`.stacks`).  It imports nothing of the Context: init() installs it.
"""
