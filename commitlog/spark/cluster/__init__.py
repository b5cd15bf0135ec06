"""Cluster writes through the archive tier (docs/spark-cluster.md): tasks on any host stage their
records as objects on the tier, the driver commits them by creating the log's next manifest
version (commitlog.archive.versions).

    staging   the task side: records into a private local log, its sealed segments uploaded
    commit    the driver side: the claim with its deadline, the check, the manifest CAS, abort
    cluster_writer  the Spark batch writer and its driver-side preparation
    cluster_sink    the streaming sink: each micro-batch a cluster job keyed by sink and batch
"""
