"""`hookstream demo`: the whole pipeline on one machine, with receivers that verify signatures."""
