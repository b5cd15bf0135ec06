package commitlog.spark.jvm;

import java.io.IOException;
import java.util.Iterator;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.WriteSummary;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;

/**
 * Writes handed to the Python data source, each of its tasks run with the Arrow batches' byte
 * bound lifted. Spark 4.3 measures the batch it sends to a Python writer after every row unless
 * spark.sql.execution.arrow.maxBytesPerBatch is exactly 2147483647; that check costs about half
 * of the JVM's CPU in a write. The runner reads the setting from the task's local properties when
 * the task starts writing, so setting it there changes that task alone, not the session. Batches
 * stay bounded by spark.sql.execution.arrow.maxRecordsPerBatch rows.
 */
final class PythonWrites {
    static final String MAX_BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch";
    static final String NO_BYTE_BOUND = "2147483647";

    private PythonWrites() {
    }

    static WriteBuilder builder(WriteBuilder python) {
        return new Builder(python);
    }

    /** The Python builder's write, truncated when Spark asks (overwrite mode). */
    private static final class Builder implements WriteBuilder, SupportsTruncate {
        private WriteBuilder python;

        Builder(WriteBuilder python) {
            this.python = python;
        }

        @Override
        public WriteBuilder truncate() {
            python = ((SupportsTruncate) python).truncate();
            return this;
        }

        @Override
        public Write build() {
            return new LogWrite(python.build());
        }
    }

    private static final class LogWrite implements Write {
        private final Write python;

        LogWrite(Write python) {
            this.python = python;
        }

        @Override
        public String description() {
            return python.description();
        }

        @Override
        public BatchWrite toBatch() {
            return new Batch(python.toBatch());
        }

        @Override
        public StreamingWrite toStreaming() {
            return new Streaming(python.toStreaming());
        }

        @Override
        public CustomMetric[] supportedCustomMetrics() {
            return python.supportedCustomMetrics();
        }

        @Override
        public CustomTaskMetric[] reportDriverMetrics() {
            return python.reportDriverMetrics();
        }
    }

    private static final class Batch implements BatchWrite {
        private final BatchWrite python;

        Batch(BatchWrite python) {
            this.python = python;
        }

        @Override
        public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
            DataWriterFactory factory = python.createBatchWriterFactory(info);
            return (DataWriterFactory) (partition, task) -> new Unbounded(factory.createWriter(partition, task));
        }

        @Override
        public boolean useCommitCoordinator() {
            return python.useCommitCoordinator();
        }

        @Override
        public void onDataWriterCommit(WriterCommitMessage message) {
            python.onDataWriterCommit(message);
        }

        @Override
        public void commit(WriterCommitMessage[] messages) {
            python.commit(messages);
        }

        @Override
        public void commit(WriterCommitMessage[] messages, WriteSummary summary) {
            python.commit(messages, summary);
        }

        @Override
        public void abort(WriterCommitMessage[] messages) {
            python.abort(messages);
        }
    }

    private static final class Streaming implements StreamingWrite {
        private final StreamingWrite python;

        Streaming(StreamingWrite python) {
            this.python = python;
        }

        @Override
        public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
            StreamingDataWriterFactory factory = python.createStreamingWriterFactory(info);
            return (StreamingDataWriterFactory) (partition, task, epoch) ->
                    new Unbounded(factory.createWriter(partition, task, epoch));
        }

        @Override
        public boolean useCommitCoordinator() {
            return python.useCommitCoordinator();
        }

        @Override
        public void commit(long epoch, WriterCommitMessage[] messages) {
            python.commit(epoch, messages);
        }

        @Override
        public void abort(long epoch, WriterCommitMessage[] messages) {
            python.abort(epoch, messages);
        }
    }

    /** A Python task's writer, started with no byte bound on its Arrow batches. */
    private static final class Unbounded implements DataWriter<InternalRow> {
        private final DataWriter<InternalRow> python;

        Unbounded(DataWriter<InternalRow> python) {
            this.python = python;
        }

        @Override
        public void writeAll(Iterator<InternalRow> rows) throws IOException {
            TaskContext task = TaskContext.get();
            if (task != null) {
                task.getLocalProperties().setProperty(MAX_BYTES_PER_BATCH, NO_BYTE_BOUND);
            }
            python.writeAll(rows);
        }

        @Override
        public void write(InternalRow row) throws IOException {
            python.write(row);
        }

        @Override
        public WriterCommitMessage commit() throws IOException {
            return python.commit();
        }

        @Override
        public void abort() throws IOException {
            python.abort();
        }

        @Override
        public void close() throws IOException {
            python.close();
        }

        @Override
        public CustomTaskMetric[] currentMetricsValues() {
            return python.currentMetricsValues();
        }
    }
}
