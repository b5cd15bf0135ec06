package commitlog.spark.jvm;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * What a read needs in the tasks: the log's path, failOnDataLoss, the consumer group (named in
 * errors), its archive tier's location (null without one), and the partitions Python planned:
 * option {@code plan}, JSON {@code {"path": p, "failOnDataLoss": b, "group": g, "archive": {"url",
 * "root", "name"}, "partitions": [{"host": h or null, "runs": [[s, e], ...], "prefer": [h, ...], "archived": {"start",
 * "end", "segments": [[base, end, bytes, sha256], ...]}}]}} (commitlog.spark.jvm.read_planner.plan_json
 * writes it). Immutable.
 */
final class ReadOptions implements Serializable {
    private static final long serialVersionUID = 1L;

    final String path;
    final boolean failOnDataLoss;
    final String group;
    final ArchiveTier.Location archive;

    ReadOptions(String path, boolean failOnDataLoss, String group, ArchiveTier.Location archive) {
        this.path = path;
        this.failOnDataLoss = failOnDataLoss;
        this.group = group;
        this.archive = archive;
    }

    /** The options and partitions of a plan's JSON. */
    static ReadOptions of(JsonNode plan) {
        JsonNode group = plan.get("group");
        return new ReadOptions(plan.get("path").asText(), plan.get("failOnDataLoss").asBoolean(true),
                group == null || group.isNull() ? null : group.asText(), ArchiveTier.Location.of(plan.get("archive")));
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
            JsonNode host = part.get("host");
            JsonNode preferred = part.path("prefer");
            String[] prefer = new String[preferred.size()];
            for (int i = 0; i < prefer.length; i++) {
                prefer[i] = preferred.get(i).asText();
            }
            parts.add(new LogPartition(starts, ends, host == null || host.isNull() ? null : host.asText(),
                    ArchiveTier.Listing.of(part.get("archived")), prefer));
        }
        if (parts.isEmpty()) {        // one empty partition, as Spark gives a Python source that plans none
            parts.add(new LogPartition(new long[0], new long[0], ""));
        }
        return parts.toArray(new LogPartition[0]);
    }
}
