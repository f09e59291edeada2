"""The Tick to Kafka: the publisher and its on-disk spool.
"""
