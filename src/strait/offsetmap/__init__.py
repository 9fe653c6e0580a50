"""The exact offset map: which source offsets landed at which destination offsets.

Workers record it from delivery reports (runs of consecutive records, not one entry per
record) and publish it to the destination topic ``__strait_offsets.<route>``: after each
checkpoint commit (:class:`strait.offsetmap.store.MapWriter`), or on exactly-once routes inside
the transaction that commits the records (:class:`strait.offsetmap.store.TransactionMap`).
Failover reads it to move a consumer group from the source cluster to the destination exactly
where it was (:mod:`strait.offsetmap.failover`); the leading controller keeps it as long as
the data it translates (:mod:`strait.offsetmap.retention`). Runs are stored in a small binary
encoding (:mod:`strait.offsetmap.codec`); what the map costs is counted per route
(:mod:`strait.offsetmap.cost`).
"""
