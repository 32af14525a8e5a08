"""hookstream api."""
