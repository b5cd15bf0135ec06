package commitlog.spark.jvm;

import java.io.IOException;
import java.nio.ByteBuffer;
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
 * with a warning; a log that ends before what was committed fails. A run is read in pieces: from
 * the log's own segments where they hold it (a partition of the log's host), else from the archive
 * tier's checked objects ({@link ArchiveTier}), as commitlog.archive.tiered reads across both.
 * Not thread-safe.
 */
final class LogPartitionReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger(LogPartitionReader.class);
    private static final BufferAllocator ROOT = new RootAllocator(Long.MAX_VALUE);

    private final ReadOptions options;
    private final LogPartition partition;
    private final StructType schema;
    private final BufferAllocator allocator;
    private final SegmentCursor local;         // the log's segments; null: the archive holds the partition
    private final ArchiveTier archive;         // null: no archive option
    private SegmentCursor cursor;              // the current piece's: local, or an archived object's
    private ArchiveTier.Segment piece;         // the archived segment it walks (null: local)
    private long pieceEnd;                     // where the current piece stops
    private ArrowPayload current;
    private int run = -1;
    private long offset;                       // where the current run goes on

    LogPartitionReader(ReadOptions options, LogPartition partition, StructType schema) {
        this.options = options;
        this.partition = partition;
        this.schema = schema;
        String here = thisHost();
        if (partition.starts.length > 0 && partition.host != null && !partition.host.equals(here)) {
            throw new IllegalStateException("WrongHostError: commit log " + options.path + " is on host '"
                    + partition.host + "', where this read was planned, but this Spark task runs on host '"
                    + here + "': a log is read and written on its own host only (use Spark in local mode, "
                    + "or a cluster whose single worker is that host)");
        }
        boolean reads = partition.starts.length > 0;
        if (reads && partition.host == null && (options.archive == null || partition.archived == null)) {
            throw new IllegalStateException("a partition of commit log " + options.path
                    + " was planned for any host without its archive tier");
        }
        this.local = reads && partition.host != null ? new SegmentCursor(Paths.get(options.path)) : null;
        this.archive = reads && options.archive != null && partition.archived != null
                ? new ArchiveTier(options.archive, partition.archived, Paths.get(options.path)) : null;
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
            if (cursor != null && offset < pieceEnd && cursor.next(pieceEnd)) {
                offset = cursor.recordOffset + 1;
                if ((cursor.attributes & SegmentCursor.ATTR_CONTROL) != 0) {
                    continue;
                }
                current = new ArrowPayload(
                        cursor.buffer().duplicate().position(cursor.valueStart).limit(cursor.valueEnd),
                        schema, allocator, "record " + cursor.recordOffset + " of commit log " + options.path);
                return true;
            }
            if (cursor != null) {
                endPiece();
            }
            if (run < 0 || offset >= partition.ends[run]) {
                if (++run >= partition.starts.length) {
                    return false;
                }
                offset = partition.starts[run];
            }
            startPiece();
        }
    }

    /** The current piece walked to its end: what it says of the log, then the run goes on after it. */
    private void endPiece() {
        long end = partition.ends[run];
        if (piece != null) {
            if (cursor.stop() == SegmentCursor.Stop.BAD) {
                throw archive.corrupt(archive.key(piece), "no valid record at byte " + cursor.position());
            }
            offset = Math.max(offset, pieceEnd);      // its last offsets may be a compaction's gap
        } else {
            // Records after the last one returned may be dead (marked, or removed by a compaction):
            // only a log that ends early lost what the ledger committed.
            if (cursor.stop() != SegmentCursor.Stop.NONE && cursor.nextOffset() < end) {
                throw endsEarly(cursor.nextOffset(), end, cursor.stop() == SegmentCursor.Stop.BAD
                        ? " (a torn or corrupt record stands there)" : "");
            }
            offset = end;
        }
        cursor = null;
        piece = null;
    }

    /**
     * Place a cursor at {@code offset} of the current run: the log's segments when they hold it,
     * else the archive's object holding it (or the next one, past a hole a compaction left before
     * archiving); offsets that retention removed from both are lost.
     */
    private void startPiece() {
        long end = partition.ends[run];
        long localStart = local == null ? Long.MAX_VALUE : local.startOffset();
        boolean onDisk = local != null && offset >= localStart;
        if (onDisk && local.seek(offset)) {
            cursor = local;
            pieceEnd = end;
            return;
        }
        if (archive == null) {                        // the disk alone: it let the offset go
            lose(Math.min(end, Math.max(localStart, offset + 1)));
            if (offset < end && local.seek(offset)) {
                cursor = local;
                pieceEnd = end;
            } else {
                offset = end;                         // removed as well, meanwhile: nothing of the run is left
            }
            return;
        }
        if (onDisk) {
            localStart = local.startOffset();         // evicted meanwhile: the start moved first
        }
        boolean below = local == null || offset < localStart;
        long first = firstHeld(localStart);
        if (offset < first) {
            lose(Math.min(end, Math.max(first, offset + 1)));
            return;
        }
        archivedPiece(end, below ? Math.min(end, localStart) : end, below);
    }

    /** The archived object holding {@code offset} up to {@code stop} (the disk's start, or the
     * run's end), or the next one past a hole; {@code below}: the disk does not hold the offset. */
    private void archivedPiece(long end, long stop, boolean below) {
        ArchiveTier.Segment found = archive.from(offset);
        if (found == null || found.base >= stop) {
            if (!below) {                             // on neither tier, though the disk's start is before it
                lose(Math.min(end, offset + 1));
            } else if (local == null && archive.end() < end) {
                throw endsEarly(Math.max(offset, archive.end()), end, "");
            } else {
                offset = stop;                        // a hole a compaction left: dead records only
            }
            return;
        }
        ByteBuffer bytes = archive.load(found);
        if (bytes == null) {
            return;                                   // the manifest changed since the plan: again
        }
        piece = found;
        offset = Math.max(offset, found.base);
        pieceEnd = Math.min(found.end, stop);
        cursor = SegmentCursor.over(bytes, found.base);
        cursor.seek(offset);
    }

    /** The first offset either tier holds (the archive's start when it holds records the disk does
     * not), as commitlog.archive.tiered says a log's start. */
    private long firstHeld(long localStart) {
        if (archive != null && archive.start() < localStart && archive.end() > archive.start()) {
            return archive.start();
        }
        return local == null ? (archive == null ? 0 : archive.end()) : localStart;
    }

    /** Offsets [offset, lostTo) are gone from both tiers: fail, or skip them (failOnDataLoss=false). */
    private void lose(long lostTo) {
        if (options.failOnDataLoss) {
            throw new IllegalStateException(dataLoss(offset, lostTo));
        }
        LOG.warn("skipping offsets [{}, {}) of {}: removed by retention before they were read "
                + "(failOnDataLoss=false)", offset, lostTo, options.path);
        offset = lostTo;
    }

    private IllegalStateException endsEarly(long at, long end, String why) {
        return new IllegalStateException("commit log " + options.path + " ends at offset " + at
                + " but records up to " + end + " were committed to it (was the log replaced or truncated?)" + why);
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
        if (local != null) {
            local.close();
        }
        allocator.close();
    }
}
