"""A rank that never imports torch: its start is what a launcher costs (issue 41)."""

import os

print("rank", os.environ["RANK"], flush=True)
