// The Java client's driver for the interop matrix: Apache Kafka's own KafkaConsumer and KafkaProducer, speaking
// the JSON-lines report every driver prints (tests/interop/drivers/common.py), one event per line on stdout.
// Classic groups use the client's assignors; with --group-protocol consumer (KIP-848) the coordinator assigns
// with the server-side assignor standing for --assignor (range as range, anything else as uniform).
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class InteropDriver {
    private static final Map<String, String> CLASSIC_ASSIGNORS = Map.of(
            "range", "org.apache.kafka.clients.consumer.RangeAssignor",
            "roundrobin", "org.apache.kafka.clients.consumer.RoundRobinAssignor",
            "cooperative-sticky", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = parseArgs(argv);
        emit("start", fields("client", "java", "version", clientVersion()));
        try {
            if (args.get("role").equals("producer")) {
                produce(args);
            } else {
                consume(args);
            }
        } catch (Exception e) {
            emit("error", fields("error", e.toString()));
            throw e;
        }
    }

    /** kafka-clients' version, from the properties file its jar carries (what the client logs at start). */
    private static String clientVersion() throws java.io.IOException {
        Properties props = new Properties();
        try (var in = KafkaConsumer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) {
                props.load(in);
            }
        }
        return props.getProperty("version", "unknown");
    }

    private static Map<String, String> parseArgs(String[] argv) {
        Map<String, String> args = new HashMap<>(Map.of(
                "group", "interop", "role", "consumer", "assignor", "range", "group-protocol", "classic",
                "session-timeout-ms", "6000", "heartbeat-interval-ms", "300", "rebalance-timeout-ms", "10000",
                "stall-revoke-ms", "0", "count", "100"));
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value, got " + argv[i]);
            }
            args.put(argv[i].substring(2), argv[i + 1]);
        }
        for (String required : List.of("bootstrap", "topic")) {
            if (!args.containsKey(required)) {
                throw new IllegalArgumentException("--" + required + " is required");
            }
        }
        return args;
    }

    private static void produce(Map<String, String> args) {
        Properties p = new Properties();
        p.put("bootstrap.servers", args.get("bootstrap"));
        p.put("linger.ms", "5");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        int count = Integer.parseInt(args.get("count"));
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(args.get("topic"), ("v" + i).getBytes()));
            }
            producer.flush();
        }
        emit("produced", fields("count", count));
    }

    private static void consume(Map<String, String> args) throws InterruptedException {
        Properties p = new Properties();
        p.put("bootstrap.servers", args.get("bootstrap"));
        p.put("group.id", args.get("group"));
        p.put("client.id", args.getOrDefault("client-id", "java"));
        p.put("group.protocol", args.get("group-protocol"));
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("max.poll.interval.ms", args.get("rebalance-timeout-ms"));
        p.put("metadata.max.age.ms", "5000");
        p.put("reconnect.backoff.max.ms", "500");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        if (args.get("group-protocol").equals("consumer")) {
            // The session timeout and heartbeat interval are the coordinator's (group.consumer.*), not the client's.
            p.put("group.remote.assignor", args.get("assignor").equals("range") ? "range" : "uniform");
        } else {
            p.put("partition.assignment.strategy", CLASSIC_ASSIGNORS.get(args.get("assignor")));
            p.put("session.timeout.ms", args.get("session-timeout-ms"));
            p.put("heartbeat.interval.ms", args.get("heartbeat-interval-ms"));
        }
        if (args.containsKey("instance-id")) {
            p.put("group.instance.id", args.get("instance-id"));
        }
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p);
        Ownership own = new Ownership(Long.parseLong(args.get("stall-revoke-ms")));
        // SIGTERM runs the shutdown hooks: ask the poll loop to stop, and hold the JVM until the consumer is
        // closed (a LeaveGroup), as an application's hook does.
        CountDownLatch closed = new CountDownLatch(1);
        Thread mainThread = Thread.currentThread();
        final boolean[] stop = {false};
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop[0] = true;
            consumer.wakeup();
            try {
                closed.await();
            } catch (InterruptedException e) {
                mainThread.interrupt();
            }
            // A JVM ended by a signal exits 143 even after its hooks ran; this stop was asked for and done.
            System.out.flush();
            Runtime.getRuntime().halt(0);
        }));
        consumer.subscribe(List.of(args.get("topic")), own);
        Map<TopicPartition, OffsetAndMetadata> pending = new HashMap<>();
        try {
            while (!stop[0]) {
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(100));
                } catch (WakeupException e) {
                    break;
                } catch (KafkaException e) {
                    emit("poll_error", fields("error", e.toString(), "retriable", e instanceof RetriableException));
                    continue;
                }
                List<List<Long>> recs = new ArrayList<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    recs.add(List.of((long) r.partition(), r.offset()));
                    pending.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                if (!recs.isEmpty()) {
                    emit("records", fields("recs", recs));
                }
                if (pending.isEmpty()) {
                    continue;
                }
                // Only what the member still owns: a revoked partition's records were handed to another.
                pending.keySet().removeIf(tp -> !consumer.assignment().contains(tp));
                try {
                    consumer.commitSync(pending);
                    Map<String, Object> offsets = new LinkedHashMap<>();
                    pending.forEach((tp, o) -> offsets.put(Integer.toString(tp.partition()), o.offset()));
                    emit("committed", fields("offsets", offsets));
                    pending.clear();
                } catch (CommitFailedException | RebalanceInProgressException e) {
                    // The group is rebalancing: the next poll completes it, and the commit is retried after it.
                    emit("commit_failed", fields("error", e.toString()));
                } catch (WakeupException e) {
                    break;
                }
            }
        } finally {
            consumer.close();
            emit("exit", fields());
            closed.countDown();
        }
    }

    /** The partitions the member owns, kept from the rebalance callbacks and reported with each event. */
    private static final class Ownership implements ConsumerRebalanceListener {
        private final TreeSet<Integer> owned = new TreeSet<>();
        private long stallMs;

        Ownership(long stallMs) {
            this.stallMs = stallMs;
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            TreeSet<Integer> parts = numbers(partitions);
            owned.addAll(parts);
            emit("assigned", fields("partitions", new ArrayList<>(parts), "owned", new ArrayList<>(owned)));
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            if (removed("revoked", partitions) && stallMs > 0) {
                long ms = stallMs;
                stallMs = 0;
                emit("stall", fields("ms", ms));
                try {
                    Thread.sleep(ms);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                emit("stall_end", fields());
            }
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            removed("lost", partitions);
        }

        private boolean removed(String ev, Collection<TopicPartition> partitions) {
            if (partitions.isEmpty()) {
                return false;  // the client also calls back with nothing revoked
            }
            TreeSet<Integer> parts = numbers(partitions);
            owned.removeAll(parts);
            emit(ev, fields("partitions", new ArrayList<>(parts), "owned", new ArrayList<>(owned)));
            return true;
        }

        private static TreeSet<Integer> numbers(Collection<TopicPartition> partitions) {
            TreeSet<Integer> out = new TreeSet<>();
            partitions.forEach(tp -> out.add(tp.partition()));
            return out;
        }
    }

    // -- the JSON-lines report ---------------------------------------------------------------------------

    private static Map<String, Object> fields(Object... kv) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i + 1 < kv.length; i += 2) {
            out.put((String) kv[i], kv[i + 1]);
        }
        return out;
    }

    private static synchronized void emit(String ev, Map<String, Object> fields) {
        StringBuilder sb = new StringBuilder("{\"t\": ").append(System.currentTimeMillis() / 1000.0)
                .append(", \"ev\": ").append(json(ev));
        fields.forEach((k, v) -> sb.append(", ").append(json(k)).append(": ").append(json(v)));
        System.out.println(sb.append('}'));
        System.out.flush();
    }

    private static String json(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Number || v instanceof Boolean) {
            return v.toString();
        }
        if (v instanceof Map<?, ?> m) {
            StringBuilder sb = new StringBuilder("{");
            m.forEach((k, x) -> sb.append(sb.length() > 1 ? ", " : "").append(json(k.toString())).append(": ")
                    .append(json(x)));
            return sb.append('}').toString();
        }
        if (v instanceof Collection<?> c) {
            StringBuilder sb = new StringBuilder("[");
            for (Object x : c) {
                sb.append(sb.length() > 1 ? ", " : "").append(json(x));
            }
            return sb.append(']').toString();
        }
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : v.toString().toCharArray()) {
            switch (ch) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    if (ch < 0x20) {
                        sb.append(String.format("\\u%04x", (int) ch));
                    } else {
                        sb.append(ch);
                    }
                }
            }
        }
        return sb.append('"').toString();
    }
}
