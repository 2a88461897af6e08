"""The Kafka adapter, for every direction: the only package that imports confluent-kafka."""
