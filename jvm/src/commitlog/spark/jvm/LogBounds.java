package commitlog.spark.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.zip.CRC32;

/**
 * Where a log's offsets begin and which gaps between its segments a compaction recorded, as the
 * Python store keeps them: {@code start.offset} (commitlog/startoffset.py) and {@code compacted}
 * (commitlog/gaps.py). Stateless; every call reads the files.
 */
final class LogBounds {
    private LogBounds() {
    }

    /**
     * The start offset of the log in {@code directory} whose first segment starts at {@code first}
     * (-1: none): the newer valid slot of {@code start.offset} (two 4 KiB slots, each
     * magic "CLSO", u64 sequence, u64 offset, CRC32 of those, big endian), or the first segment's
     * base when that is higher or the file is missing; -1 for a log without segments. Offsets
     * before the first segment that a compaction recorded removing ({@code compacted}) count as
     * kept: a read from them passes them (they held dead records only); retention removed the rest.
     * With the file present, offsets between it and the first segment that no compaction recorded
     * are nobody's (head removal advances the file before it unlinks): CorruptLogError naming them.
     */
    static long startOffset(Path directory, long first) {
        long recorded = -1;
        boolean present = false;
        try (FileChannel file = FileChannel.open(directory.resolve("start.offset"), StandardOpenOption.READ)) {
            present = true;
            long newest = -1;
            for (int slot = 0; slot < 2; slot++) {
                ByteBuffer raw = ByteBuffer.allocate(24);      // big endian, as the file is
                if (file.read(raw, slot * 4096L) != 24) {
                    continue;
                }
                CRC32 check = new CRC32();
                check.update(raw.array(), 0, 20);
                if (raw.getInt(0) == 0x434c534f && (int) check.getValue() == raw.getInt(20)
                        && raw.getLong(4) > newest) {
                    newest = raw.getLong(4);
                    recorded = raw.getLong(12);
                }
            }
        } catch (NoSuchFileException e) {
            // a log that never removed anything
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read the start offset of commit log " + directory, e);
        }
        if (first < 0 || recorded >= first) {
            return Math.max(first, recorded);
        }
        long[] missing = present ? unrecorded(directory, Math.max(recorded, 0), first) : null;
        if (missing != null) {
            throw new IllegalStateException(corrupt(directory.resolve(String.format("%020d.log", first)),
                    "offsets [" + missing[0] + ", " + missing[1] + ") are missing before this segment (the "
                    + "start offset is " + Math.max(recorded, 0) + "): no compaction recorded removing them "
                    + "(a segment file deleted or renamed outside the store?)"));
        }
        return coveredFrom(directory, first, Math.max(recorded, 0));
    }

    /**
     * The ranges compactions removed with whole segments: {@code compacted} (magic "CLGP", u32
     * count, count x (u64 start, u64 end) sorted and disjoint, CRC32 of all before it, big endian;
     * commitlog/gaps.py). Null when the file is missing on a log an older store compacted (its
     * {@code .compact.lock} exists): every gap then counts as recorded.
     */
    private static long[][] compactedRanges(Path directory) {
        Path file = directory.resolve("compacted");
        byte[] raw;
        try {
            if (Files.isSymbolicLink(file)) {
                throw new IllegalStateException(corrupt(file, "is a symbolic link, not the store's file"));
            }
            raw = Files.readAllBytes(file);
        } catch (NoSuchFileException e) {
            return Files.exists(directory.resolve(".compact.lock")) ? null : new long[][] {{}, {}};
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read " + file, e);
        }
        ByteBuffer b = ByteBuffer.wrap(raw);
        int count = raw.length < 12 ? -1 : b.getInt(4);
        CRC32 check = new CRC32();
        check.update(raw, 0, Math.max(0, raw.length - 4));
        if (count < 0 || b.getInt(0) != 0x434c4750 || raw.length != 12 + 16L * count
                || (int) check.getValue() != b.getInt(raw.length - 4)) {
            throw new IllegalStateException(corrupt(file, "compacted ranges file does not verify"));
        }
        long[][] ranges = new long[2][count];
        for (int i = 0; i < count; i++) {
            ranges[0][i] = b.getLong(8 + 16 * i);
            ranges[1][i] = b.getLong(16 + 16 * i);
        }
        return ranges;
    }

    /** The first part of [lo, hi) no compaction recorded removing, or null when all of it is. */
    static long[] unrecorded(Path directory, long lo, long hi) {
        long[][] ranges = compactedRanges(directory);
        if (ranges == null) {
            return null;
        }
        for (int i = 0; i < ranges[0].length && lo < hi; i++) {
            if (ranges[1][i] <= lo) {
                continue;
            }
            if (ranges[0][i] > lo) {
                return new long[] {lo, Math.min(hi, ranges[0][i])};
            }
            lo = ranges[1][i];
        }
        return lo < hi ? new long[] {lo, hi} : null;
    }

    /** The lowest offset at or above {@code floor} from which up to {@code hi} is recorded removed. */
    private static long coveredFrom(Path directory, long hi, long floor) {
        long[][] ranges = compactedRanges(directory);
        if (ranges == null) {
            return Math.min(floor, hi);
        }
        for (int i = 0; i < ranges[0].length; i++) {
            if (ranges[0][i] < hi && ranges[1][i] >= hi) {
                return Math.max(floor, ranges[0][i]);
            }
        }
        return hi;
    }

    static String corrupt(Path file, String why) {
        return "CorruptLogError: corrupt log file " + file + ": " + why;
    }
}
