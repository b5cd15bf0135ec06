package commitlog.spark.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * The driver's planner, installed by commitlog.spark.register(spark) in this JVM (one per
 * driver: a later install replaces it). Thread-safe.
 */
public final class Planners {
    static final ObjectMapper JSON = new ObjectMapper();
    private static volatile Planner installed;

    private Planners() {
    }

    public static void install(Planner planner) {
        installed = planner;
    }

    static ObjectNode request(String op) {
        return JSON.createObjectNode().put("op", op);
    }

    /** Send {@code request} to the planner; its answer, or its error raised here. */
    static JsonNode call(ObjectNode request) {
        Planner planner = installed;
        if (planner == null) {
            throw new IllegalStateException("the commitlog data source plans its reads in Python: call "
                    + "commitlog.spark.register(spark) in the driver first");
        }
        JsonNode answer = ReadOptions.parse(planner.call(request.toString()), "the planner's answer");
        JsonNode error = answer.get("error");
        if (error != null) {
            throw new IllegalStateException(error.asText());
        }
        return answer;
    }
}
