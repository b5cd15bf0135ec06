package commitlog.spark.jvm;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A task's read of one {@link LogPartition}: one columnar batch per visible record, in log order,
 * as commitlog.spark.reading.reader.read_partition yields them in Python, with the same failures: a run
 * retention removed fails (the DataLossError's message) or, with failOnDataLoss=false, is skipped
 * with a warning; a log that ends before what was committed fails. Not thread-safe.
 */
final class LogPartitionReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger(LogPartitionReader.class);
    private static final BufferAllocator ROOT = new RootAllocator(Long.MAX_VALUE);

    private final ReadOptions options;
    private final LogPartition partition;
    private final StructType schema;
    private final BufferAllocator allocator;
    private final SegmentCursor cursor;
    private ArrowPayload current;
    private int run = -1;
    private long offset;                       // where the current run goes on

    LogPartitionReader(ReadOptions options, LogPartition partition, StructType schema) {
        this.options = options;
        this.partition = partition;
        this.schema = schema;
        String here = thisHost();
        if (partition.starts.length > 0 && !partition.host.equals(here)) {
            throw new IllegalStateException("WrongHostError: commit log " + options.path + " is on host '"
                    + partition.host + "', where this read was planned, but this Spark task runs on host '"
                    + here + "': a log is read and written on its own host only (use Spark in local mode, "
                    + "or a cluster whose single worker is that host)");
        }
        this.cursor = new SegmentCursor(Paths.get(options.path));
        this.allocator = ROOT.newChildAllocator("commitlog " + options.path, 0, Long.MAX_VALUE);
    }

    /** The host name as Python's socket.gethostname() gives it (the kernel's node name). */
    static String thisHost() {
        try {
            return Files.readString(Path.of("/proc/sys/kernel/hostname")).strip();
        } catch (IOException | RuntimeException e) {
            try {
                return java.net.InetAddress.getLocalHost().getHostName();
            } catch (java.net.UnknownHostException unknown) {
                return "localhost";
            }
        }
    }

    @Override
    public boolean next() {
        closeCurrent();
        while (true) {
            if (run >= 0 && offset < partition.ends[run] && cursor.next(partition.ends[run])) {
                offset = cursor.recordOffset + 1;
                if ((cursor.attributes & SegmentCursor.ATTR_CONTROL) != 0) {
                    continue;
                }
                current = new ArrowPayload(
                        cursor.buffer().duplicate().position(cursor.valueStart).limit(cursor.valueEnd),
                        schema, allocator, "record " + cursor.recordOffset + " of commit log " + options.path);
                return true;
            }
            // Records after the last one returned may be dead (marked, or removed by a compaction):
            // only a log that ends early lost what the ledger committed.
            if (run >= 0 && cursor.stop() != SegmentCursor.Stop.NONE && cursor.nextOffset() < partition.ends[run]) {
                throw new IllegalStateException("commit log " + options.path + " ends at offset " + cursor.nextOffset()
                        + " but records up to " + partition.ends[run] + " were committed to it (was the log "
                        + "replaced or truncated?)" + (cursor.stop() == SegmentCursor.Stop.BAD
                        ? " (a torn or corrupt record stands there)" : ""));
            }
            if (++run >= partition.starts.length) {
                return false;
            }
            offset = partition.starts[run];
            startRun();
        }
    }

    private void startRun() {
        long end = partition.ends[run];
        long start = cursor.startOffset();
        if (offset < start || !cursor.seek(offset)) {
            long lostTo = Math.min(end, Math.max(start, offset + 1));
            if (options.failOnDataLoss) {
                throw new IllegalStateException(dataLoss(offset, lostTo));
            }
            LOG.warn("skipping offsets [{}, {}) of {}: removed by retention before they were read "
                    + "(failOnDataLoss=false)", offset, lostTo, options.path);
            offset = lostTo;
            if (offset < end && !cursor.seek(offset)) {
                offset = end;         // removed as well, meanwhile: nothing of the run is left
            }
        }
    }

    private String dataLoss(long from, long to) {
        String who = options.group == null ? "" : " (consumer group '" + options.group + "')";
        return "DataLossError: offsets [" + from + ", " + to + ") of commit log " + options.path
                + " were removed by retention before the stream" + who + " read them: " + (to - from)
                + " offset(s) lost; the log now starts at offset " + to
                + ". Set option failOnDataLoss=false to skip the lost range.";
    }

    @Override
    public ColumnarBatch get() {
        return current.batch();
    }

    private void closeCurrent() {
        if (current != null) {
            current.close();
            current = null;
        }
    }

    @Override
    public void close() {
        closeCurrent();
        cursor.close();
        allocator.close();
    }
}
