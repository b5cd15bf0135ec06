"""Reading the log from Spark: the visible records, planned from the ledger.

Modules: reader (batch reads: partitions planned on the driver, read zero-copy in tasks, data loss
checked), stream (the streaming source: offsets, the frontier never passing an unresolved writer,
the consumer group's progress).

Stands on the ledger (`..ledger`) and the shared modules (schema, source_options, host, errors);
never on writing. The JVM reader (`..jvm.read_planner`) plans through these same modules. Importing
this package imports none of its modules (they import pyarrow and pyspark): import the module you
need.
"""
