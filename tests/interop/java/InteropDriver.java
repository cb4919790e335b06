// Java driver of the interop suite: Apache Kafka's own KafkaConsumer and KafkaProducer (kafka-clients, the
// version make kafka-deps resolves into build/kafka/lib). One group member or one producer per process, with
// the command line and the JSON lines of tests/interop/drivers/common.py on stdout; the client's own logs go
// to stderr (log4j2.properties beside this file). Compiled with plain javac by tests/interop/java_build.py.
//
// --group-protocol classic runs the classic protocol with the client-side assignor standing for --assignor;
// consumer runs KIP-848's, where the coordinator assigns with the server-side assignor named by
// group.remote.assignor (range as range, cooperative-sticky as uniform, KIP-848's incremental default).
// --topic-regex subscribes by pattern instead of --topic: a SubscriptionPattern (resolved by the coordinator)
// under KIP-848, a client-side java.util.regex.Pattern under the classic protocol.

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.Future;
import java.util.regex.Pattern;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class InteropDriver {
    // ------------------------------------------------------------------------------------------ options

    static final class Options {
        String bootstrap, topic, group = "interop", role = "consumer", assignor = "range", instanceId,
                groupProtocol = "classic", clientId, topicRegex, debug;
        int sessionTimeoutMs = 6000, heartbeatIntervalMs = 300, rebalanceTimeoutMs = 10_000, stallRevokeMs = 0,
                count = 100;
    }

    static Options parseArgs(String[] argv) {
        Options o = new Options();
        for (int i = 0; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value, got " + argv[i]);
            }
            String v = argv[i + 1];
            switch (argv[i].substring(2)) {
                case "bootstrap": o.bootstrap = v; break;
                case "topic": o.topic = v; break;
                case "group": o.group = v; break;
                case "role": o.role = v; break;
                case "assignor": o.assignor = v; break;
                case "instance-id": o.instanceId = v; break;
                case "group-protocol": o.groupProtocol = v; break;
                case "client-id": o.clientId = v; break;
                case "topic-regex": o.topicRegex = v; break;
                case "debug": o.debug = v; break;
                case "protocol-name": break; // the kafkajs driver's; nothing to rename here
                case "session-timeout-ms": o.sessionTimeoutMs = Integer.parseInt(v); break;
                case "heartbeat-interval-ms": o.heartbeatIntervalMs = Integer.parseInt(v); break;
                case "rebalance-timeout-ms": o.rebalanceTimeoutMs = Integer.parseInt(v); break;
                case "stall-revoke-ms": o.stallRevokeMs = Integer.parseInt(v); break;
                case "count": o.count = Integer.parseInt(v); break;
                default: throw new IllegalArgumentException("unknown option " + argv[i]);
            }
        }
        if (o.bootstrap == null || o.topic == null) {
            throw new IllegalArgumentException("--bootstrap and --topic are required");
        }
        return o;
    }

    // --------------------------------------------------------------------------------------- JSON lines

    // The few value types the events hold, written by hand: a JSON library would be one more jar to load
    // before the first line, on a JVM whose start-up the scenarios wait for.
    static void json(StringBuilder b, Object v) {
        if (v == null) {
            b.append("null");
        } else if (v instanceof String) {
            String s = (String) v;
            b.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c == '"' || c == '\\') {
                    b.append('\\').append(c);
                } else if (c < 0x20) {
                    b.append(String.format("\\u%04x", (int) c));
                } else {
                    b.append(c);
                }
            }
            b.append('"');
        } else if (v instanceof Number || v instanceof Boolean) {
            b.append(v);
        } else if (v instanceof Map) {
            b.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) b.append(", ");
                first = false;
                json(b, String.valueOf(e.getKey()));
                b.append(": ");
                json(b, e.getValue());
            }
            b.append('}');
        } else if (v instanceof Collection) {
            b.append('[');
            boolean first = true;
            for (Object x : (Collection<?>) v) {
                if (!first) b.append(", ");
                first = false;
                json(b, x);
            }
            b.append(']');
        } else {
            json(b, v.toString());
        }
    }

    static final Object EMIT_LOCK = new Object();

    /** One event line: `t` (seconds since the epoch, as Python's time.time()), `ev` and key/value pairs. */
    static void emit(String ev, Object... kv) {
        Instant now = Instant.now();
        StringBuilder b = new StringBuilder(128);
        b.append("{\"t\": ").append(now.getEpochSecond()).append('.')
                .append(String.format("%06d", now.getNano() / 1000)).append(", \"ev\": ");
        json(b, ev);
        for (int i = 0; i + 1 < kv.length; i += 2) {
            b.append(", ");
            json(b, kv[i]);
            b.append(": ");
            json(b, kv[i + 1]);
        }
        b.append('}');
        synchronized (EMIT_LOCK) {
            System.out.println(b);
            System.out.flush();
        }
    }

    // -------------------------------------------------------------------------------------- ownership

    /** The partitions the member owns, from its rebalance listener; --topic's in `owned`, all in `topics`. */
    static final class Ownership implements ConsumerRebalanceListener {
        final Options o;
        final TreeSet<TopicPartition> owned = new TreeSet<>((a, b) ->
                a.topic().equals(b.topic()) ? Integer.compare(a.partition(), b.partition()) : a.topic().compareTo(b.topic()));
        KafkaConsumer<byte[], byte[]> consumer;
        int stallMs;

        Ownership(Options o) {
            this.o = o;
            this.stallMs = o.stallRevokeMs;
        }

        List<Integer> ofTopic(Collection<TopicPartition> tps) {
            List<Integer> out = new ArrayList<>();
            for (TopicPartition tp : tps) {
                if (tp.topic().equals(o.topic)) out.add(tp.partition());
            }
            out.sort(null);
            return out;
        }

        Map<String, List<Integer>> byTopic(Collection<TopicPartition> tps) {
            Map<String, List<Integer>> out = new TreeMap<>();
            for (TopicPartition tp : tps) out.computeIfAbsent(tp.topic(), k -> new ArrayList<>()).add(tp.partition());
            out.values().forEach(l -> l.sort(null));
            return out;
        }

        void report(String ev, Collection<TopicPartition> changed, Object... extra) {
            List<Object> kv = new ArrayList<>(List.of("partitions", ofTopic(changed), "owned", ofTopic(owned)));
            if (o.topicRegex != null) {
                kv.addAll(List.of("topics", byTopic(owned)));
            }
            kv.addAll(List.of(extra));
            emit(ev, kv.toArray());
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            owned.addAll(partitions);
            // The listener runs inside poll(), on the consumer's own thread, so its group metadata may be read.
            var meta = consumer.groupMetadata();
            report("assigned", partitions, "generation", meta.generationId(), "member_id", meta.memberId());
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            if (partitions.isEmpty()) return;
            // What was processed is committed before the partitions go to another member, as an application
            // does here; a failure only means the new owner reads a little again.
            commit(consumer, o, partitions);
            pending.keySet().removeAll(partitions);
            owned.removeAll(partitions);
            report("revoked", partitions);
            List<Integer> mine = ofTopic(partitions);
            if (stallMs > 0 && (!mine.isEmpty() || o.topicRegex != null)) {
                int ms = stallMs;
                stallMs = 0;
                emit("stall", "ms", ms);
                try {
                    Thread.sleep(ms);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                emit("stall_end");
            }
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            if (partitions.isEmpty()) return;
            pending.keySet().removeAll(partitions);
            owned.removeAll(partitions);
            report("lost", partitions);
        }
    }

    // --------------------------------------------------------------------------------------- consumer

    static Properties consumerConfig(Options o) {
        Properties p = new Properties();
        p.put("bootstrap.servers", o.bootstrap);
        p.put("group.id", o.group);
        p.put("client.id", o.clientId != null ? o.clientId : "java");
        p.put("group.protocol", o.groupProtocol);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("max.poll.interval.ms", Integer.toString(o.rebalanceTimeoutMs));
        p.put("metadata.max.age.ms", "5000");
        p.put("reconnect.backoff.max.ms", "500");
        p.put("retry.backoff.max.ms", "500");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        if (o.groupProtocol.equals("consumer")) {
            // The coordinator assigns, and owns the session timeout and heartbeat interval
            // (group.consumer.*): ConsumerConfig refuses all three client settings under this protocol.
            switch (o.assignor) {
                case "range": p.put("group.remote.assignor", "range"); break;
                case "cooperative-sticky": p.put("group.remote.assignor", "uniform"); break;
                default: throw new IllegalArgumentException(
                        "group.protocol=consumer has no client-side assignor; no server-side one for " + o.assignor);
            }
        } else {
            Map<String, String> assignors = Map.of("range", RangeAssignor.class.getName(),
                    "roundrobin", RoundRobinAssignor.class.getName(),
                    "cooperative-sticky", CooperativeStickyAssignor.class.getName());
            String cls = assignors.get(o.assignor);
            if (cls == null) throw new IllegalArgumentException("no assignor " + o.assignor + " in this driver");
            p.put("partition.assignment.strategy", cls);
            p.put("session.timeout.ms", Integer.toString(o.sessionTimeoutMs));
            p.put("heartbeat.interval.ms", Integer.toString(o.heartbeatIntervalMs));
        }
        if (o.instanceId != null) p.put("group.instance.id", o.instanceId);
        return p;
    }

    /** Processed records' next offsets not yet committed, by partition; touched only on the poll thread. */
    static final Map<TopicPartition, Long> pending = new HashMap<>();

    /** commitSync of what was processed (of `only`, when given) and is still assigned; false: retry it. */
    static boolean commit(KafkaConsumer<byte[], byte[]> consumer, Options o, Collection<TopicPartition> only) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : consumer.assignment()) {
            Long next = pending.get(tp);
            if (next != null && (only == null || only.contains(tp))) offsets.put(tp, new OffsetAndMetadata(next));
        }
        if (offsets.isEmpty()) return true;
        try {
            consumer.commitSync(offsets, Duration.ofSeconds(5));
        } catch (WakeupException e) {
            throw e;
        } catch (KafkaException e) {
            // RebalanceInProgressException, CommitFailedException (the generation or epoch moved on), a
            // timeout while the coordinator is away: the next poll completes the rebalance, and the commit of
            // what is still assigned then is retried after it.
            emit("commit_failed", "error", e.getClass().getSimpleName() + ": " + e.getMessage());
            return false;
        }
        Map<String, Object> mine = new TreeMap<>();
        offsets.forEach((tp, om) -> {
            pending.remove(tp, om.offset());
            if (tp.topic().equals(o.topic)) mine.put(Integer.toString(tp.partition()), om.offset());
        });
        emit("committed", "offsets", mine);
        return true;
    }

    static volatile boolean stopRequested;

    static void consume(Options o) {
        Ownership own = new Ownership(o);
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerConfig(o));
        own.consumer = consumer;
        onStop(() -> {
            stopRequested = true;
            consumer.wakeup();
        });
        if (o.topicRegex == null) {
            consumer.subscribe(List.of(o.topic), own);
        } else if (o.groupProtocol.equals("consumer")) {
            consumer.subscribe(new SubscriptionPattern(o.topicRegex), own);
        } else {
            consumer.subscribe(Pattern.compile(o.topicRegex), own);
        }
        try {
            boolean retryCommit = false;
            while (!stopRequested) {
                ConsumerRecords<byte[], byte[]> batch;
                try {
                    batch = consumer.poll(Duration.ofMillis(100));
                } catch (WakeupException e) {
                    break;
                } catch (KafkaException e) {
                    emit("poll_error", "error", e.toString(), "retriable", e instanceof RetriableException);
                    continue;
                }
                List<List<Long>> recs = new ArrayList<>();
                Map<String, List<List<Long>>> byTopic = new TreeMap<>();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    List<Long> pair = List.of((long) r.partition(), r.offset());
                    if (r.topic().equals(o.topic)) recs.add(pair);
                    byTopic.computeIfAbsent(r.topic(), k -> new ArrayList<>()).add(pair);
                    pending.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
                }
                if (!batch.isEmpty()) {
                    if (o.topicRegex != null) {
                        emit("records", "recs", recs, "topics", byTopic);
                    } else {
                        emit("records", "recs", recs);
                    }
                } else if (!retryCommit) {
                    continue;
                }
                // A failed commit is retried on later polls even without records: after the last batch there
                // may be none, and the offsets must still land.
                try {
                    retryCommit = !commit(consumer, o, null);
                } catch (WakeupException e) {
                    break;
                }
            }
        } finally {
            // close() runs the revoke callback (which commits) and leaves: LeaveGroup for a dynamic classic
            // member, KIP-848's leave heartbeat (epoch -1, or -2 for a static member) otherwise.
            try {
                consumer.close(Duration.ofSeconds(15));
            } catch (KafkaException e) {
                emit("error", "error", "close: " + e);
            }
        }
    }

    // --------------------------------------------------------------------------------------- producer

    static void produce(Options o) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", o.bootstrap);
        p.put("client.id", o.clientId != null ? o.clientId : "java-producer");
        p.put("linger.ms", "5");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < o.count; i++) {
                sent.add(producer.send(new ProducerRecord<>(o.topic, ("v" + i).getBytes())));
            }
            producer.flush();
            for (Future<RecordMetadata> f : sent) f.get();
        }
        emit("produced", "count", o.count);
    }

    // ------------------------------------------------------------------------------------------- main

    // SIGTERM / SIGINT ask for a clean close (LeaveGroup) and an exit status of 0. The JVM's own handling
    // (shutdown hooks, then exit 143) would race the close against the exit, so the signals are taken over.
    static void onStop(Runnable action) {
        sun.misc.SignalHandler handler = sig -> action.run();
        sun.misc.Signal.handle(new sun.misc.Signal("TERM"), handler);
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), handler);
    }

    /** kafka-clients' release, from the version file in its jar (the class that reads it is internal). */
    static String clientVersion() {
        Properties p = new Properties();
        try (var in = KafkaConsumer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) p.load(in);
        } catch (java.io.IOException e) {
            return "?";
        }
        return p.getProperty("version", "?");
    }

    public static void main(String[] argv) {
        Options o;
        try {
            o = parseArgs(argv);
        } catch (IllegalArgumentException e) {
            emit("error", "error", e.getMessage());
            System.exit(2);
            return;
        }
        if (o.debug != null) {
            org.apache.logging.log4j.core.config.Configurator.setRootLevel(org.apache.logging.log4j.Level.DEBUG);
        }
        emit("start", "client", "java", "version", clientVersion());
        try {
            if (o.role.equals("producer")) {
                produce(o);
            } else {
                consume(o);
            }
        } catch (Exception e) {
            emit("error", "error", e.toString());
            System.exit(1);
        }
        emit("exit");
        System.exit(0);
    }
}
