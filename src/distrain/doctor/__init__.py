"""The doctor's old name: ``python -m distrain.doctor`` (and ``distrain run -m distrain.doctor``)
still run it, now at distrain.tools.doctor (``distrain doctor``)."""
