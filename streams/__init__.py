"""hookstream: Kafka-native webhook delivery."""

__version__ = "0.1.0"
