package commitlog.spark.jvm;

import java.nio.ByteBuffer;
import java.nio.file.Paths;
import java.util.zip.CRC32;

/**
 * {@code java -cp commitlog-spark.jar commitlog.spark.jvm.DumpRecords LOG START END}: one line per
 * record {@link SegmentCursor} returns in [START, END), "offset attributes timestamp keyLength
 * valueLength valueCRC32", then "stop REASON NEXT_OFFSET". The tests compare it with the Python
 * store's scan of the same files (tests/spark/test_spark_jvm_format.py).
 */
public final class DumpRecords {
    private DumpRecords() {
    }

    public static void main(String[] args) {
        long start = Long.parseLong(args[1]);
        long end = Long.parseLong(args[2]);
        StringBuilder out = new StringBuilder();
        try (SegmentCursor cursor = new SegmentCursor(Paths.get(args[0]))) {
            out.append("start ").append(cursor.startOffset()).append('\n');
            if (cursor.seek(start)) {
                CRC32 crc = new CRC32();
                while (cursor.next(end)) {
                    ByteBuffer value = cursor.buffer().duplicate().position(cursor.valueStart).limit(cursor.valueEnd);
                    crc.reset();
                    crc.update(value);
                    out.append(cursor.recordOffset).append(' ').append(cursor.attributes).append(' ')
                            .append(cursor.timestamp).append(' ').append(cursor.keyLength).append(' ')
                            .append(cursor.valueEnd - cursor.valueStart).append(' ').append(crc.getValue()).append('\n');
                }
                out.append("stop ").append(cursor.stop()).append(' ').append(cursor.nextOffset()).append('\n');
            } else {
                out.append("stop REMOVED ").append(start).append('\n');
            }
        }
        System.out.print(out);
    }
}
