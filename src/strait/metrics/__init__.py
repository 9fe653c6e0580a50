"""Observability: Prometheus metrics of workers and controllers, stuck-partition healing,
slow-worker detection, and the figures behind the dashboard and `strait status`.

Pure decisions (what is stuck, what moves, which worker is slow) live in `progress`,
`healing` and `slow`; I/O (Kafka offsets, the coordination store, HTTP) sits in `probe`,
`observatory` and `exposition`.
"""
