"""`distrain run --cpu`, launcher side: rehearse a GPU script on CPU."""
