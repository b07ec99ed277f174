"""`distrain bench scaling`: the study (:mod:`.scaling`), its workload and runs, their numbers,
charts and report."""
