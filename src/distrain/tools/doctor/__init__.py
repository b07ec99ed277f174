"""`distrain doctor`: what is wrong with this machine (and every rank of a job), and the fix.

One module per probe family (torch_build, gpu + compat, container, network, limits, tools);
:mod:`.local` runs them, :mod:`.ranks` is the all-ranks check, :mod:`.report` prints.
"""
