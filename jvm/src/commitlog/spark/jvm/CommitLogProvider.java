package commitlog.spark.jvm;

import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * {@code format("commitlog")} once commitlog.spark.register(spark) added this jar: reads, batch
 * and streaming, are planned by the Python planner and read here as columnar batches (across an
 * S3 archive tier, by the Python data source of the same name, as the planner says); writes go
 * to the Python data source of the same name (commitlog.spark.source), whose ledger makes them
 * atomic, with its tasks' Arrow batches unbounded in bytes (PythonWrites). Option {@code plan} (commitlog.spark.read) gives a batch read planned beforehand.
 */
public final class CommitLogProvider implements TableProvider, DataSourceRegister {

    @Override
    public String shortName() {
        return "commitlog";
    }

    static ObjectNode optionsJson(Map<String, String> options) {
        ObjectNode json = Planners.JSON.createObjectNode();
        options.forEach(json::put);
        return json;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        ObjectNode request = Planners.request("schema");
        request.set("options", optionsJson(options.asCaseSensitiveMap()));
        return (StructType) DataType.fromJson(Planners.call(request).get("schema").asText());
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new LogTable(schema, partitioning, properties);
    }

    /** A log: read here, written by the Python data source. */
    static final class LogTable implements Table, SupportsRead, SupportsWrite {
        private final StructType schema;
        private final Transform[] partitioning;
        private final Map<String, String> properties;

        LogTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
            this.schema = schema;
            this.partitioning = partitioning;
            this.properties = properties;
        }

        @Override
        public String name() {
            return "commitlog " + properties.getOrDefault("path", "");
        }

        @Override
        @SuppressWarnings("deprecation")
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return Set.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ,
                    TableCapability.BATCH_WRITE, TableCapability.STREAMING_WRITE, TableCapability.TRUNCATE);
        }

        /** Read here, unless the planner says the Python data source reads (across an S3 tier,
         * which the JVM has no client for: commitlog.spark.jvm.archive_plan). */
        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            ObjectNode request = Planners.request("reader");
            request.set("options", optionsJson(properties));
            if ("python".equals(Planners.call(request).path("reader").asText())) {
                return ((SupportsRead) python().getTable(schema, partitioning, properties)).newScanBuilder(options);
            }
            return new LogScan(schema, optionsJson(properties));
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            return PythonWrites.builder(
                    ((SupportsWrite) python().getTable(schema, partitioning, properties)).newWriteBuilder(info));
        }

        private static PythonDataSourceV2 python() {
            PythonDataSourceV2 python = new PythonDataSourceV2();
            python.setShortName("commitlog");
            return python;
        }
    }

    /** Column pruning, then partitions planned in Python, read as columnar batches. */
    static final class LogScan implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
        private final StructType full;
        private StructType schema;
        private final ObjectNode options;
        private JsonNode plan;

        LogScan(StructType schema, ObjectNode options) {
            this.full = schema;
            this.schema = schema;
            this.options = options;
        }

        @Override
        public void pruneColumns(StructType required) {
            schema = required;
        }

        @Override
        public Scan build() {
            return this;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public String description() {
            return "commitlog " + options.path("path").asText();
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        /** The plan: the one the caller pinned (option plan), else the planner's, made once. */
        private JsonNode plan() {
            if (plan == null) {
                JsonNode pinned = options.get("plan");
                if (pinned != null) {
                    plan = ReadOptions.parse(pinned.asText(), "option plan");
                } else {
                    ObjectNode request = Planners.request("batch");
                    request.set("options", options);
                    request.put("schema", full.json());
                    plan = Planners.call(request);
                }
            }
            return plan;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            return ReadOptions.partitions(plan());
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new ReaderFactory(ReadOptions.of(plan()), schema);
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            return new LogStream(options, full);
        }
    }

    /** Columnar readers of log partitions, created in the tasks. */
    static final class ReaderFactory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final ReadOptions options;
        private final StructType schema;

        ReaderFactory(ReadOptions options, StructType schema) {
            this.options = options;
            this.schema = schema;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new LogPartitionReader(options, (LogPartition) partition, schema);
        }

        @Override
        public PartitionReader<org.apache.spark.sql.catalyst.InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("the commitlog JVM reader reads columnar batches only");
        }
    }
}
