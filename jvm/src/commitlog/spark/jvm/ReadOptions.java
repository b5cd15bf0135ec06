package commitlog.spark.jvm;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * What a read needs in the tasks: the log's path, failOnDataLoss, the consumer group (named in
 * errors), and the partitions Python planned: option {@code plan}, JSON
 * {@code {"path": p, "failOnDataLoss": b, "group": g, "partitions": [{"host": h, "runs": [[s, e], ...]}]}}
 * (commitlog.spark.jvm.read_planner.plan_json writes it). Immutable.
 */
final class ReadOptions implements Serializable {
    private static final long serialVersionUID = 1L;

    final String path;
    final boolean failOnDataLoss;
    final String group;

    ReadOptions(String path, boolean failOnDataLoss, String group) {
        this.path = path;
        this.failOnDataLoss = failOnDataLoss;
        this.group = group;
    }

    /** The options and partitions of a plan's JSON. */
    static ReadOptions of(JsonNode plan) {
        JsonNode group = plan.get("group");
        return new ReadOptions(plan.get("path").asText(), plan.get("failOnDataLoss").asBoolean(true),
                group == null || group.isNull() ? null : group.asText());
    }

    static JsonNode parse(String text, String what) {
        try {
            return Planners.JSON.readTree(text);
        } catch (java.io.IOException e) {
            throw new IllegalArgumentException(what + " is not valid JSON: " + e.getMessage(), e);
        }
    }

    static LogPartition[] partitions(JsonNode plan) {
        List<LogPartition> parts = new ArrayList<>();
        for (JsonNode part : plan.get("partitions")) {
            JsonNode runs = part.get("runs");
            long[] starts = new long[runs.size()];
            long[] ends = new long[runs.size()];
            for (int i = 0; i < starts.length; i++) {
                starts[i] = runs.get(i).get(0).asLong();
                ends[i] = runs.get(i).get(1).asLong();
            }
            parts.add(new LogPartition(starts, ends, part.get("host").asText()));
        }
        if (parts.isEmpty()) {        // one empty partition, as Spark gives a Python source that plans none
            parts.add(new LogPartition(new long[0], new long[0], ""));
        }
        return parts.toArray(new LogPartition[0]);
    }
}
