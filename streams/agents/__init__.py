"""hookstream agents."""
