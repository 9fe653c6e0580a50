"""Building blocks of the pass-through (batch) copier, issue 12: pure record batch v2
parsing and rewriting (``records``), which fetched batches are produced (``select``), batch
or record mode per partition (``compat``), idempotent sequences (``sequences``), and a
prototype of the raw Fetch/Produce I/O on kafka-python's protocol classes (``wire``).

Nothing here is wired into the copier yet.
"""
