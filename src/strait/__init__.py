"""Strait: replicate Kafka topics between clusters and keep each cluster's disks balanced."""

__version__ = "0.1.0"
