"""Strait: replicate Kafka topics between clusters and keep each cluster's disks balanced."""

from strait.version import package_version

__version__ = package_version()
