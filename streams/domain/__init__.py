"""Pure domain logic: no I/O, the clock and randomness are injected."""
