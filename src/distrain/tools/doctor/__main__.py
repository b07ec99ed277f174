"""``python -m distrain.tools.doctor``: what ``distrain run -n N -m distrain.tools.doctor`` starts on each rank."""

import sys

from distrain.tools.doctor.cli import main

raise SystemExit(main(sys.argv[1:]))
