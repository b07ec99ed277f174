"""A local package named like an installed one (PyYAML): a repo checkout's own copy."""

SHADOW_MARKER = "local yaml beside the script"
