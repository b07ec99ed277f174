"""`distrain run --hosts`: one command for many machines over ssh."""
