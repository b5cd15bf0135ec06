package commitlog.spark.jvm;

import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A stream offset as the Python planner writes it, {@code {"offset": n, "commitlog": path,
 * "group": g}}, kept as that JSON: the progress listener reads the log and group from it.
 */
final class LogOffset extends Offset {
    private final String json;

    LogOffset(String json) {
        this.json = json;
    }

    @Override
    public String json() {
        return json;
    }
}
