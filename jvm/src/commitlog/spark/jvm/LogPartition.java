package commitlog.spark.jvm;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * Runs [start, end) of consecutive visible offsets of one log, read in order by one task, on the
 * host whose driver planned them (the log lives on that host's disk). Planned in Python
 * (commitlog.spark.reading.reader.plan_partitions). Immutable.
 */
public final class LogPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final long[] starts;
    final long[] ends;
    final String host;

    public LogPartition(long[] starts, long[] ends, String host) {
        this.starts = starts;
        this.ends = ends;
        this.host = host;
    }

    @Override
    public String[] preferredLocations() {
        return new String[] {host};
    }
}
