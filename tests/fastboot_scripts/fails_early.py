"""Fails before distrain.init() in the way FAILS_EARLY names: the fast path must not rerun it."""

import os

kind = os.environ["FAILS_EARLY"]
if kind == "missing-module":
    import tqdm_that_is_not_installed  # noqa: F401
elif kind == "value-error":
    raise ValueError("--data points to no folder")
elif kind == "syntax-error":
    exec(compile("def broken(:\n    pass\n", "model_config.py", "exec"))
elif kind == "runtime-error":  # what a library refusing a forked process raises: retried fresh
    raise RuntimeError("the licence server refused this host")

import distrain  # noqa: E402

distrain.init()
