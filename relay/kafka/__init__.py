"""Kafka edge of the relay (confluent-kafka / librdkafka)."""
