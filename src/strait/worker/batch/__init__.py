"""The pass-through (batch) copier, route option ``copy: batch``: whole record batches copied
without decompressing them.

:class:`~strait.worker.batch.pipeline.BatchPipeline` is the copier's third kind of pipeline:
it moves whole record batches over :mod:`link` (raw Fetch/Produce on kafka-python's protocol
classes; its socket reads in :mod:`transport`, its answers read in :mod:`answers`), with the
per-partition accounting in :mod:`partition`, partition leaders from
:mod:`leaders`, producer ids from :mod:`identities` and produce round trips for the metrics
from :mod:`rtts`. The pure rules it strings
together: record batch v2 parsing and rewriting (``records``), which fetched batches are
produced (``select``), batch or record mode per partition (``compat``), idempotent sequences
(``sequences``), what to do with a produce answer (``outcomes``). :mod:`protocol` holds the
request versions and the answers' plain values; ``bench`` measures the per-batch CPU work.
A route's backlog runs its batch pipeline in a process of its own: :mod:`remote` (the worker's
side), :mod:`child` (the process) and :mod:`relay` (what they tell each other), paced by
:mod:`budget` and :mod:`pace`.
"""
