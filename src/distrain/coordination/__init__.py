"""The files and store keys that coordinate a job's processes, as opposed to reporting.

A report goes to the job's event stream (distrain/events/); what is here decides what another
process does: which one process stops a static job's launcher (:mod:`.stop_claim`), and when a
replica group trains and ends (:mod:`.replica_marks`).  Both sides use it; it imports no torch.
"""
