package commitlog.spark.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.ReadableByteChannel;

import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One record's value, an Arrow IPC stream (a schema, then one batch, as commitlog.spark.schema
 * encodes it), as a Spark {@link ColumnarBatch} of the columns {@code wanted} names, looked up by
 * name. The batch's buffers belong to {@code allocator} until {@link #close}. Not thread-safe.
 */
final class ArrowPayload implements AutoCloseable {
    private final ArrowStreamReader reader;
    private final ColumnarBatch batch;

    ArrowPayload(ByteBuffer value, StructType wanted, BufferAllocator allocator, String where) {
        reader = new ArrowStreamReader(new BufferChannel(value), allocator);
        try {
            VectorSchemaRoot root = reader.getVectorSchemaRoot();
            if (!reader.loadNextBatch()) {
                throw new IllegalStateException(where + " holds an Arrow stream without a batch");
            }
            ColumnVector[] columns = new ColumnVector[wanted.fields().length];
            for (int i = 0; i < columns.length; i++) {
                String name = wanted.fields()[i].name();
                FieldVector vector = root.getVector(name);
                if (vector == null) {
                    throw new IllegalStateException(where + " has no column " + name);
                }
                columns[i] = new ArrowColumnVector(vector);
            }
            batch = new ColumnarBatch(columns, root.getRowCount());
        } catch (IOException e) {
            close();
            throw new UncheckedIOException(where + " is not a readable Arrow stream", e);
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    ColumnarBatch batch() {
        return batch;
    }

    @Override
    public void close() {
        try {
            reader.close();       // frees the vectors the batch's columns wrap
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** A channel over a buffer: what ArrowStreamReader reads from, without copying it first. */
    private static final class BufferChannel implements ReadableByteChannel {
        private final ByteBuffer source;
        private boolean open = true;

        BufferChannel(ByteBuffer source) {
            this.source = source;
        }

        @Override
        public int read(ByteBuffer target) {
            if (!source.hasRemaining()) {
                return -1;
            }
            int n = Math.min(target.remaining(), source.remaining());
            target.put(source.slice(source.position(), n));
            source.position(source.position() + n);
            return n;
        }

        @Override
        public boolean isOpen() {
            return open;
        }

        @Override
        public void close() {
            open = false;
        }
    }
}
