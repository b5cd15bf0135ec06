package commitlog.spark.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;

/**
 * A streaming read: every offset decision is the Python planner's (commitlog.spark.reading.stream's
 * reader, kept in the driver's Python process under this stream's id: frontier, pending
 * writers, consumer-group commits, data-loss checks); the micro-batches' records are read here,
 * in the JVM, as columnar batches. Called by Spark's stream execution thread.
 */
final class LogStream implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow {
    private final String id;
    private final ReadOptions options;
    private final StructType schema;

    LogStream(ObjectNode options, StructType schema) {
        ObjectNode open = Planners.request("open");
        open.set("options", options);
        open.put("schema", schema.json());
        JsonNode answer = Planners.call(open);
        this.id = answer.get("stream").asText();
        this.options = ReadOptions.of(answer);
        this.schema = schema;
    }

    /** A request about this stream, with the offsets given (null: none). */
    private ObjectNode request(String op, Offset start, Offset end) {
        ObjectNode request = Planners.request(op).put("stream", id);
        if (start != null) {
            request.set("start", ReadOptions.parse(start.json(), "a stream offset"));
        }
        if (end != null) {
            request.set("end", ReadOptions.parse(end.json(), "a stream offset"));
        }
        return request;
    }

    private JsonNode call(String op, Offset start, Offset end) {
        return Planners.call(request(op, start, end));
    }

    private static Offset offsetOf(JsonNode answer) {
        JsonNode offset = answer.get("offset");
        return offset == null || offset.isNull() ? null : new LogOffset(offset.toString());
    }

    @Override
    public Offset initialOffset() {
        return offsetOf(call("initialOffset", null, null));
    }

    @Override
    public Offset deserializeOffset(String json) {
        return new LogOffset(json);
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        JsonNode rows = call("defaultReadLimit", null, null).get("maxRows");
        return rows == null || rows.isNull() ? ReadLimit.allAvailable() : ReadLimit.maxRows(rows.asLong());
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
        ObjectNode request = request("latestOffset", start, null);
        if (limit instanceof ReadMaxRows) {
            request.put("maxRows", ((ReadMaxRows) limit).maxRows());
        }
        return offsetOf(Planners.call(request));
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("latestOffset(start, limit) plans this stream");
    }

    @Override
    public Offset reportLatestOffset() {
        return offsetOf(call("reportLatestOffset", null, null));
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        call("prepareForTriggerAvailableNow", null, null);
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        return ReadOptions.partitions(call("partitions", start, end));
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new CommitLogProvider.ReaderFactory(options, schema);
    }

    @Override
    public void commit(Offset end) {
        call("commit", null, end);
    }

    @Override
    public void stop() {
        call("stop", null, null);
    }
}
