"""hookstream adapters."""
