"""hookstream cli."""
