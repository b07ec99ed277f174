"""``python -m distrain.tools.doctor``: what ``distrain run -m …`` starts on each rank."""

import sys

from distrain.tools.doctor.cli import main

raise SystemExit(main(sys.argv[1:]))
