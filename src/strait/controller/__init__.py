"""The replication controller: one leader (ZooKeeper election) maps every partition of every
route to one live worker; standbys serve the API and take over when the leader dies.

Pure decisions: `assignment` (who copies what), `handover` (clean two-step moves),
`discovery.plan_topic_updates` (patterns, partition growth), `rates`, `invariants`.
I/O at the edges: `loop` (the control cycle over the coordination store), `discovery`
(source metadata), `service` (what the REST API may do), `server` (the process).
"""
