"""hookstream's hot path: confluent-kafka consumer loops, one per lane.

The router, the dispatcher (with its flow control and outbox), and the backfill and
replay job runner read and write Kafka through confluent-kafka directly, in batches, rather than
through Faust agents: a Faust agent costs about 95 µs per event, half the per-delivery budget
(docs/architecture.md). Offsets are committed only after a delivery is settled (D1).
"""
