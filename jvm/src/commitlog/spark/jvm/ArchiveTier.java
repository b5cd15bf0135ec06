package commitlog.spark.jvm;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A log's {@code file://} archive tier as a task reads it (commitlog/archive, docs/archive.md):
 * the manifest entries the partition's plan carries (commitlog.spark.jvm.archive_plan), and each
 * entry's data object {@code <root>/<name>/<key>} (by default {@code <20-digit base>.log}; a
 * cluster log's staged objects name theirs), the segment's bytes up to its end marker. An object is read whole into memory and checked against its entry (its size, its
 * SHA-256) before a record of it is served, as commitlog.archive.object_check does; the bytes
 * walked are the bytes checked. An object gone or different makes the tier's manifest be read
 * again (a cluster log's newest version under {@code manifests/}, else {@code manifest.json},
 * as commitlog.archive.versions says): an entry it no longer lists (retention or a compaction replaced it since the plan) is
 * planned again from it, one it still lists fails with the Python reader's ArchiveCorruptError
 * message. A host keeping copies of a cluster log's objects (its log directory a cache of the tier,
 * {@code cluster-cache.json}, commitlog.archive.local_copies) serves an entry from
 * {@code cache/<key>} when that copy passes the same whole check; a copy missing or differing is
 * never an error: a differing one is removed, and the tier's object is read. Not thread-safe: one
 * per task.
 */
final class ArchiveTier {
    private static final int CHUNK = 1 << 20;
    private static final Logger LOG = LoggerFactory.getLogger(ArchiveTier.class);

    /** Where the tier keeps the log's objects; {@code url} names it in errors. Immutable. */
    static final class Location implements Serializable {
        private static final long serialVersionUID = 1L;
        final String url;
        final String root;
        final String name;

        Location(String url, String root, String name) {
            this.url = url;
            this.root = root;
            this.name = name;
        }

        static Location of(JsonNode archive) {
            return archive == null || archive.isNull() ? null : new Location(archive.get("url").asText(),
                    archive.get("root").asText(), archive.get("name").asText());
        }

        String key(String file) {
            return name + "/" + file;
        }
    }

    /** A manifest entry: offsets [base, end) archived in a data object of {@code bytes} bytes. */
    static final class Segment implements Serializable {
        private static final long serialVersionUID = 1L;
        final long base;
        final long end;
        final long bytes;
        final String sha256;
        final String file;              // the data object's key below the log's folder

        Segment(long base, long end, long bytes, String sha256, String file) {
            this.base = base;
            this.end = end;
            this.bytes = bytes;
            this.sha256 = sha256;
            this.file = file == null || file.isEmpty() ? String.format("%020d.log", base) : file;
        }

        boolean sameAs(Segment other) {
            return other != null && other.base == base && other.end == end && other.bytes == bytes
                    && other.sha256.equals(sha256) && other.file.equals(file);
        }
    }

    /** The archive as a partition was planned: its start and end then, the entries its runs touch. */
    static final class Listing implements Serializable {
        private static final long serialVersionUID = 1L;
        final long start;
        final long end;
        final Segment[] segments;

        Listing(long start, long end, Segment[] segments) {
            this.start = start;
            this.end = end;
            this.segments = segments;
        }

        static Listing of(JsonNode archived) {
            if (archived == null || archived.isNull()) {
                return null;
            }
            JsonNode entries = archived.get("segments");
            Segment[] segments = new Segment[entries.size()];
            for (int i = 0; i < segments.length; i++) {
                JsonNode e = entries.get(i);
                segments[i] = new Segment(e.get(0).asLong(), e.get(1).asLong(), e.get(2).asLong(), e.get(3).asText(),
                        e.has(4) ? e.get(4).asText() : null);
            }
            return new Listing(archived.get("start").asLong(), archived.get("end").asLong(), segments);
        }
    }

    private final Location location;
    private final Path copies;                 // this host's cache/ of the log; null: none
    private final TreeMap<Long, Segment> segments = new TreeMap<>();
    private long start;
    private long end;

    ArchiveTier(Location location, Listing planned, Path logDir) {
        this.location = location;
        this.copies = logDir != null && Files.isRegularFile(logDir.resolve("cluster-cache.json"),
                LinkOption.NOFOLLOW_LINKS) ? logDir.resolve("cache") : null;
        this.start = planned.start;
        this.end = planned.end;
        for (Segment s : planned.segments) {
            segments.put(s.base, s);
        }
    }

    /** The first offset the archive holds; {@link #end}: the offset after its last. */
    long start() {
        return start;
    }

    long end() {
        return end;
    }

    /** The entry holding {@code offset}, else the first after it, else null. */
    Segment from(long offset) {
        Map.Entry<Long, Segment> at = segments.floorEntry(offset);
        if (at != null && offset < at.getValue().end) {
            return at.getValue();
        }
        Map.Entry<Long, Segment> after = segments.higherEntry(offset);
        return after == null ? null : after.getValue();
    }

    String key(Segment segment) {
        return location.key(segment.file);
    }

    /**
     * The data object of {@code segment}, checked whole against it, as a little-endian buffer;
     * null when the tier's manifest, read again, no longer lists the entry (ask {@link #from}
     * again). An object the manifest still lists that is missing or differs fails.
     */
    ByteBuffer load(Segment segment) {
        String key = key(segment);
        byte[] copy = fromCopy(segment);
        if (copy != null) {
            return ByteBuffer.wrap(copy).order(ByteOrder.LITTLE_ENDIAN);
        }
        try {
            return checked(key, segment);
        } catch (IllegalStateException problem) {
            refresh();
            if (segment.sameAs(segments.get(segment.base))) {
                throw problem;
            }
            return null;
        }
    }

    private ByteBuffer checked(String key, Segment segment) {
        Path file = Paths.get(location.root, location.name).resolve(segment.file);
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ)) {
            long size = channel.size();
            if (size != segment.bytes) {
                throw corrupt(key, size + " bytes, the manifest's `bytes` says " + segment.bytes);
            }
            if (size > Integer.MAX_VALUE - 8) {
                throw corrupt(key, size + " bytes: more than the JVM reader holds in memory");
            }
            byte[] data = new byte[(int) size];
            String found = readHashing(channel, data);
            if (found == null) {
                throw corrupt(key, "fewer bytes at its end, the manifest's `bytes` says " + segment.bytes);
            }
            if (!found.equals(segment.sha256)) {
                throw corrupt(key, "SHA-256 " + found + ", the manifest's `sha256` says " + segment.sha256
                        + ": another object than archived");
            }
            return ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN);
        } catch (NoSuchFileException e) {
            throw corrupt(key, "missing, though the manifest lists it");
        } catch (IOException e) {
            throw new UncheckedIOException("ArchiveError: archive " + location.url + " object " + key + ": "
                    + e.getMessage(), e);
        }
    }

    /** {@code data.length} bytes of {@code channel} read into {@code data}; their SHA-256 (hex),
     * null when the file ends first. */
    private static String readHashing(FileChannel channel, byte[] data) throws IOException {
        MessageDigest sha = sha256();
        for (int at = 0; at < data.length; ) {
            int n = channel.read(ByteBuffer.wrap(data, at, Math.min(CHUNK, data.length - at)), at);
            if (n < 0) {
                return null;
            }
            sha.update(data, at, n);
            at += n;
        }
        return HexFormat.of().formatHex(sha.digest());
    }

    /** This host's copy of {@code segment}'s object when it is whole and matches its entry; null
     * otherwise (no cache, no copy, or a copy that differs: removed). Never fails. */
    private byte[] fromCopy(Segment segment) {
        if (copies == null || !below(segment.file) || segment.bytes > Integer.MAX_VALUE - 8) {
            return null;
        }
        Path file = copies.resolve(segment.file);
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS)) {
            if (channel.size() == segment.bytes) {
                byte[] data = new byte[(int) segment.bytes];
                if (segment.sha256.equals(readHashing(channel, data))) {
                    return data;
                }
            }
        } catch (IOException | RuntimeException e) {
            return null;                              // missing, a link, unreadable: the tier has it
        }
        try {
            Files.deleteIfExists(file);               // a copy unlike its entry: never served
        } catch (IOException | RuntimeException e) {
            LOG.debug("copy {} not removed: {}", file, e.toString());
        }
        return null;
    }

    /** The Python reader's message for an object unlike its manifest entry (ArchiveCorruptError). */
    IllegalStateException corrupt(String key, String why) {
        return new IllegalStateException("ArchiveCorruptError: archive " + location.url + " object " + key
                + ": " + why);
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("this JVM has no SHA-256", e);
        }
    }

    /**
     * Read the tier's manifest again: its start, end and every entry (a manifest's format 1,
     * commitlog/archive/manifest.py; the fields used here checked as commitlog.archive.validation
     * checks them). No manifest: an archive holding nothing, as the Python reader takes it.
     */
    private void refresh() {
        String listed = newestVersion();
        String key = location.key(listed);
        byte[] raw;
        try {
            raw = Files.readAllBytes(Paths.get(location.root, location.name).resolve(listed));
        } catch (NoSuchFileException e) {
            segments.clear();
            start = end = 0;
            return;
        } catch (IOException e) {
            throw new UncheckedIOException("ArchiveError: archive " + location.url + " object " + key + ": "
                    + e.getMessage(), e);
        }
        JsonNode body;
        try {
            body = Planners.JSON.readTree(raw);
        } catch (IOException e) {
            throw corrupt(key, "not a manifest: the whole object: not JSON");
        }
        if (body == null || !body.isObject() || body.path("format").asInt(-1) != 1
                || !body.path("segments").isArray()) {
            throw corrupt(key, "not a manifest: not a format 1 manifest with segments");
        }
        TreeMap<Long, Segment> found = new TreeMap<>();
        long last = 0;
        for (JsonNode e : body.get("segments")) {
            String file = e.path("key").isTextual() ? e.get("key").asText() : null;
            Segment s = new Segment(natural(e, "base_offset", key), natural(e, "end_offset", key),
                    natural(e, "bytes", key), e.path("sha256").asText(""), file);
            if (s.end < s.base || s.base < last || !s.sha256.matches("[0-9a-f]{64}") || !below(s.file)) {
                throw corrupt(key, "not a manifest: the segment at " + s.base + " is out of order or malformed");
            }
            found.put(s.base, s);
            last = s.end;
        }
        long listedStart = natural(body, "start_offset", key);
        segments.clear();
        segments.putAll(found);
        start = found.isEmpty() ? listedStart : found.firstKey();
        end = found.isEmpty() ? listedStart : last;
    }

    /** The newest manifest version's key below the log's folder ({@code manifests/<20 digits>.json}),
     * else {@code manifest.json} (a single host's archive). */
    private String newestVersion() {
        Path folder = Paths.get(location.root, location.name, "manifests");
        String newest = null;
        try (java.util.stream.Stream<Path> listed = Files.list(folder)) {
            for (Path p : (Iterable<Path>) listed::iterator) {
                String n = p.getFileName().toString();
                if (n.matches("[0-9]{20}\\.json") && (newest == null || n.compareTo(newest) > 0)) {
                    newest = n;
                }
            }
        } catch (NoSuchFileException e) {
            return "manifest.json";
        } catch (IOException e) {
            throw new UncheckedIOException("ArchiveError: archive " + location.url + " object "
                    + location.key("manifests/") + ": " + e.getMessage(), e);
        }
        return newest == null ? "manifest.json" : "manifests/" + newest;
    }

    /** Whether {@code file} is a key below the log's folder (commitlog.archive.validation.relative_key). */
    private static boolean below(String file) {
        for (String part : file.split("/", -1)) {
            if (part.isEmpty() || part.equals(".") || part.equals("..") || part.indexOf('\\') >= 0) {
                return false;
            }
        }
        return true;
    }

    private long natural(JsonNode node, String field, String key) {
        JsonNode value = node.get(field);
        if (value == null || !value.isIntegralNumber() || !value.canConvertToLong() || value.asLong() < 0) {
            throw corrupt(key, "not a manifest: " + field + " is not an integer in [0, 2**63)");
        }
        return value.asLong();
    }
}
