"""`distrain bench`: scaling study, communication benchmark, reports and plots."""
