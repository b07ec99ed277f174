"""release_all lets a destroyed group go only where nothing else holds it (parallel._drop_here)."""

from __future__ import annotations

from distrain import parallel


class _Group:
    """Stands for a ProcessGroup: only its reference count matters here."""


def test_a_group_only_the_list_holds_is_dropped_at_once_and_a_held_one_kept() -> None:
    holder = [_Group()]  # the script's own reference (or a callback's on gloo's thread)
    groups = [_Group(), holder[0]]
    parallel._drop_here(groups, bound_s=0.05)
    try:
        assert groups == [] and parallel._KEPT == holder
        parallel._drop_kept()  # still held: kept
        assert parallel._KEPT == holder
        holder.clear()
        parallel._drop_kept()  # the list is its only holder now: let go
        assert parallel._KEPT == []
    finally:
        parallel._KEPT.clear()
