"""``python -m distrain.doctor``: the old command line, kept working (distrain.tools.doctor)."""

import runpy

# run as the new module runs, argv and all: one doctor, two names
runpy.run_module("distrain.tools.doctor", run_name="__main__", alter_sys=True)
