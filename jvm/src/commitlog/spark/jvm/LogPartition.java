package commitlog.spark.jvm;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * Runs [start, end) of consecutive visible offsets of one log, read in order by one task, on the
 * host whose driver planned them (the log lives on that host's disk), or on any host ({@code host}
 * null) when the log's archive tier holds them all. With the archive, {@code archived} lists the
 * manifest entries the runs touch, and {@code prefer} the hosts keeping copies of them (a cluster
 * log's, commitlog.archive.local_copies), where Spark runs the task when it can. Planned in Python (commitlog.spark.reading.reader.plan_partitions,
 * commitlog.spark.jvm.archive_plan). Immutable.
 */
public final class LogPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final long[] starts;
    final long[] ends;
    final String host;
    final ArchiveTier.Listing archived;
    final String[] prefer;

    public LogPartition(long[] starts, long[] ends, String host) {
        this(starts, ends, host, null, new String[0]);
    }

    LogPartition(long[] starts, long[] ends, String host, ArchiveTier.Listing archived, String[] prefer) {
        this.starts = starts;
        this.ends = ends;
        this.host = host;
        this.archived = archived;
        this.prefer = prefer;
    }

    /** The log's host, where its segments are; for a partition the archive holds, the hosts
     * keeping copies of its segments (none: any host). */
    @Override
    public String[] preferredLocations() {
        return host == null ? prefer.clone() : new String[] {host};
    }
}
