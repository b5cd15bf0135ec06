package commitlog.spark.jvm;

/**
 * What plans reads: commitlog.spark's Python planner (commitlog/spark/jvm/read_planner.py), reached
 * through Py4J from the driver's JVM. One JSON request in, one JSON answer out, so this interface
 * never changes when a request does. An answer {@code {"error": "..."}} is a failure to raise.
 * Implementations are called from several threads at once.
 */
public interface Planner {
    String call(String request);
}
