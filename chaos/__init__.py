"""Fault-injection scenarios for hookstream (SPEC Q1, D1): the chaos run, its audit, the soak.

`python -m chaos.run` starts a broker of its own, two `hookstream worker` processes and a farm
of local receivers, publishes events at a steady rate while killing workers with ``kill -9``
and restarting the broker, waits for the pipeline to drain, then audits every
(event, subscription) pair from Kafka's own records and what the receivers saw.
`python -m chaos.soak` runs the same pipeline without faults for a long time and samples each
worker's memory, open file descriptors and on-disk state. docs/reliability.md has the results.
"""
