"""Writing to the log from Spark: batch writes and the streaming sink, staged through the ledger.

Modules: target (driver-side preparation of a write: the log created, the schema checked and
recorded, pickled to every task), append_lock (the log's single writer lock taken in turns by many
python workers), appender (task-side appends, registered in the ledger before the first one),
batch_writer (batch writes: a job commits or aborts whole), sink (the streaming sink: a micro-batch
is a job, a batch already staged is not staged again).

Stands on the ledger (`..ledger`) and the shared modules (schema, source_options, host, errors);
never on reading. Importing this package imports none of its modules (they import pyarrow and
pyspark, but append_lock): import the module you need.
"""
