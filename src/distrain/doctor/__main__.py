"""``python -m distrain.doctor``: what ``distrain run -n N -m distrain.doctor`` starts on each rank."""

import sys

from .cli import main

raise SystemExit(main(sys.argv[1:]))
