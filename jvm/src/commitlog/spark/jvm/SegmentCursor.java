package commitlog.spark.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.TreeSet;
import java.util.zip.CRC32;

/**
 * Walks the records of a commit log's segment files, in offset order, as the Python store frames
 * them (commitlog/record.py, record formats 1 and 2): u32 body length (0: nothing written yet,
 * 0xFFFFFFFF: a sealed segment's end), u32 CRC32 of the body, then the body: u8 attributes, i64
 * timestamp, i32 key length, a u64 offset delta when attributes hold DELTA, the key, the value.
 * A record's offset is counted from the segment's base (the file name); a delta adds the offsets
 * a compaction removed before it, a format-1 gap record (GAP) stands for that many offsets.
 * Every record returned has had its CRC verified. Read-only; one cursor per thread.
 */
public final class SegmentCursor implements AutoCloseable {
    public static final int ATTR_DEAD = 0x01;
    public static final int ATTR_CONTROL = 0x02;
    public static final int ATTR_DELTA = 0x40;
    public static final int ATTR_GAP = 0x80;
    private static final int FRAME = 8;
    private static final int HEADER = 21;
    private static final int MIN_BODY = 13;
    private static final long END_MARKER = 0xFFFFFFFFL;

    /** Why a walk stopped before the offset it was asked for. */
    public enum Stop { NONE, EMPTY, END, BAD }

    private final Path directory;        // null: one segment's bytes held in memory
    private final ByteBuffer memory;
    private final TreeSet<Long> bases = new TreeSet<>();
    private final CRC32 crc = new CRC32();
    private FileChannel channel;
    private ByteBuffer segment;          // the current segment's mapping, little endian
    private long base = -1;              // its base offset
    private int position;                // where the next record starts
    private long offset;                 // the next record's offset, before any delta
    private Stop stop = Stop.NONE;

    // The record the last next() returned.
    public long recordOffset;
    public int attributes;
    public long timestamp;
    public int keyStart;
    public int keyLength;                // -1: no key
    public int valueStart;
    public int valueEnd;

    public SegmentCursor(Path directory) {
        this.directory = directory;
        this.memory = null;
        try (DirectoryStream<Path> names = Files.newDirectoryStream(directory, "*.log")) {
            for (Path name : names) {
                String file = name.getFileName().toString();
                if (file.length() == 24 && file.substring(0, 20).chars().allMatch(Character::isDigit)) {
                    bases.add(Long.parseLong(file.substring(0, 20)));
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot list commit log " + directory, e);
        }
    }

    private SegmentCursor(ByteBuffer bytes, long segmentBase) {
        this.directory = null;
        this.memory = bytes.order(ByteOrder.LITTLE_ENDIAN);
        bases.add(segmentBase);
    }

    /**
     * A cursor over one segment's bytes, base offset {@code segmentBase}, held in memory (an
     * archived segment's data object, checked: ArchiveTier): {@link #seek} and {@link #next} walk
     * it as a segment file, and it ends where its bytes do.
     */
    public static SegmentCursor over(ByteBuffer bytes, long segmentBase) {
        return new SegmentCursor(bytes, segmentBase);
    }

    /** The log's start offset (LogBounds.startOffset); -1 for a log without segments. */
    public long startOffset() {
        return LogBounds.startOffset(directory, bases.isEmpty() ? -1 : bases.first());
    }

    /**
     * Place the cursor on the segment holding {@code target}, walking to the first record at or
     * after it (records before it are walked, their CRCs verified). Returns false when no
     * segment file holds it any more (retention removed it since the listing).
     */
    public boolean seek(long target) {
        Long found = bases.floor(target);
        if (found == null && memory != null) {
            found = bases.first();            // before the bytes held: they are walked from their start
        } else if (found == null) {
            if (bases.isEmpty() || target < startOffset()) {
                return false;
            }
            found = bases.first();            // before it, a compaction's gap: passed
        }
        boolean ahead = segment != null && base == found && offset <= target && stop == Stop.NONE;
        if (!ahead && !open(found)) {
            return false;
        }
        while (offset < target && next(target)) {
            // walking up to the target
        }
        return true;
    }

    /** The offset the next record will have (before any delta it carries). */
    public long nextOffset() {
        return offset;
    }

    public Stop stop() {
        return stop;
    }

    /** The byte of the current segment where the next record starts (where a BAD one stands). */
    public int position() {
        return position;
    }

    /** The buffer the current record's key and value lie in (positions above). */
    public ByteBuffer buffer() {
        return segment;
    }

    private boolean open(long segmentBase) {
        closeSegment();
        if (memory != null) {
            segment = memory;
            base = segmentBase;
            position = 0;
            offset = segmentBase;
            stop = Stop.NONE;
            return true;
        }
        Path file = directory.resolve(String.format("%020d.log", segmentBase));
        try {
            channel = FileChannel.open(file, StandardOpenOption.READ);
            long size = channel.size();
            MappedByteBuffer map = channel.map(FileChannel.MapMode.READ_ONLY, 0, Math.min(size, Integer.MAX_VALUE));
            segment = map.order(ByteOrder.LITTLE_ENDIAN);
        } catch (NoSuchFileException e) {
            closeSegment();
            return false;
        } catch (IOException e) {
            throw new UncheckedIOException("cannot open segment " + file, e);
        }
        base = segmentBase;
        position = 0;
        offset = segmentBase;
        stop = Stop.NONE;
        return true;
    }

    /**
     * Advance to the next record returned to readers (gaps and dead records passed), stopping
     * before the first record whose offset is {@code end} or more (it stays next). Crosses into
     * the next segment where one ends (its end marker, or no room left). Returns false at
     * {@code end}, or when the log holds nothing more ({@link #stop} says why: EMPTY or END of the
     * last segment, or a BAD record, torn or corrupt).
     */
    public boolean next(long end) {
        while (segment != null && offset < end) {
            int limit = segment.limit();
            long length = position + 4 > limit ? 0 : Integer.toUnsignedLong(segment.getInt(position));
            if (length != 0 && length != END_MARKER) {
                if (!decode(length, limit)) {
                    stop = Stop.BAD;
                    return false;
                }
                if (decodedOffset >= end) {
                    return false;             // past the end: left for the next call
                }
                position = decodedNext;
                offset = decodedOffset;
                if ((attributes & ATTR_GAP) != 0) {
                    continue;                 // a format-1 gap: its span is counted, nothing returned
                }
                offset++;
                if ((attributes & ATTR_DEAD) == 0) {
                    recordOffset = decodedOffset;
                    return true;
                }
                continue;                     // written dead: passed
            }
            stop = length == 0 ? Stop.EMPTY : Stop.END;
            Long following = bases.higher(base);
            while (following != null && following < offset) {
                following = bases.higher(following);  // a compaction's swap leftover, superseded
            }
            if (following == null) {
                return false;
            }
            if (stop == Stop.EMPTY && !zerosToTheEnd(limit)) {
                stop = Stop.BAD;              // zeros where records should be: damage
                return false;
            }
            if (following > offset && !passGap(following, end)) {
                continue;                     // this segment's file was replaced: read on in it
            }
            if (!open(following)) {
                bases.remove(following);
                return false;
            }
        }
        return false;
    }

    /**
     * At the end of the segment, before a gap up to {@code following}: true when a compaction
     * recorded removing it. False, once, when the file under this name now goes on (a compaction's
     * output replaced the one mapped): the cursor is then on the same offset in the new file. A
     * gap nobody recorded (a segment file deleted or renamed outside the store) is corruption.
     */
    private boolean passGap(long following, long end) {
        long at = offset;
        long[] missing = LogBounds.unrecorded(directory, at, following);
        if (missing == null) {
            return true;
        }
        if (recheckBase != base || recheckOffset != at) {
            recheckBase = base;
            recheckOffset = at;
            long mine = base;
            if (open(mine)) {
                while (offset < at && next(at)) {
                    // walking back up to where the mapped file ended
                }
                if (offset >= at && segment != null) {
                    return false;
                }
            }
        }
        throw new IllegalStateException(LogBounds.corrupt(directory.resolve(String.format("%020d.log", following)),
                "offsets [" + missing[0] + ", " + missing[1] + ") are missing before this segment: no "
                + "compaction recorded removing them (a segment file deleted or renamed outside the store?)"));
    }

    private long recheckBase = -1;
    private long recheckOffset = -1;

    /** Whether the segment holds only zeros from {@code position}: a segment rolled without its
     * end marker (a crash or a full disk at the roll), not one with records after a zeroed run. */
    private boolean zerosToTheEnd(int limit) {
        int at = position;
        for (; at + 8 <= limit; at += 8) {
            if (segment.getLong(at) != 0) {
                return false;
            }
        }
        for (; at < limit; at++) {
            if (segment.get(at) != 0) {
                return false;
            }
        }
        return true;
    }

    private long decodedOffset;               // the decoded record's offset (after its delta)
    private int decodedNext;                  // where the record after it starts

    /** Decode the record at {@code position} without moving; false for a torn or corrupt one. */
    private boolean decode(long length, int limit) {
        long next = position + FRAME + length;
        if (length < MIN_BODY || next > limit) {
            return false;
        }
        int keyLen = segment.getInt(position + 17);
        if (keyLen < -1 || keyLen > length - MIN_BODY) {
            return false;
        }
        crc.reset();
        crc.update(segment.duplicate().position(position + FRAME).limit((int) next));
        if ((int) crc.getValue() != segment.getInt(position + 4)) {
            return false;
        }
        int attrs = segment.get(position + 8) & 0xFF;
        int body = position + HEADER;
        decodedNext = (int) next;
        decodedOffset = offset;
        if ((attrs & ATTR_GAP) != 0) {
            if (keyLen != -1 || length != MIN_BODY + 8 || (attrs & ATTR_DELTA) != 0) {
                return false;
            }
            decodedOffset += segment.getLong(body);
            attributes = attrs;
            return true;
        }
        if ((attrs & ATTR_DELTA) != 0) {
            if (length < MIN_BODY + 8 || keyLen > length - MIN_BODY - 8) {
                return false;
            }
            decodedOffset += segment.getLong(body);
            body += 8;
            attrs &= ~ATTR_DELTA;
        }
        attributes = attrs;
        timestamp = segment.getLong(position + 9);
        keyLength = keyLen;
        keyStart = body;
        valueStart = body + Math.max(keyLen, 0);
        valueEnd = (int) next;
        return true;
    }

    private void closeSegment() {
        segment = null;                   // the mapping goes with the buffer (Java has no unmap)
        if (channel != null) {
            try {
                channel.close();
            } catch (IOException ignored) {
                // a read-only channel: nothing was written that a failed close could lose
            }
            channel = null;
        }
    }

    @Override
    public void close() {
        closeSegment();
    }
}
