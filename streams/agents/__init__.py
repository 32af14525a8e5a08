"""hookstream's Faust agents: the stateful parts, each with changelog-backed tables.

Health and control (H1-H6), the notifier (H5) and analytics (O2) keep their state in Faust
tables recovered from their changelogs. The hot path is in `streams.lanes`.
"""
