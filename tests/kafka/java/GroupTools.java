// Kafka's consumer-groups tool and its Java Admin, driven from the differential tests in one JVM per run
// (a JVM start costs 1-2 s on 2 cores; a scenario makes about twenty calls).
//
//     java -cp 'build/kafka/java-tools:build/kafka/lib/*' GroupTools HOST:PORT < steps.json > answers.json
//
// stdin is a JSON list of steps; stdout one JSON answer per step, in order:
//   {"tool": [args...]}  ConsumerGroupCommand.main(["--bootstrap-server", HOST:PORT, args...]), as the
//                        kafka-consumer-groups script runs it: {"exit": N, "stdout": "...", "stderr": "..."}.
//                        The tool ends some runs with Exit.exit, which here throws instead of ending the JVM.
//   {"admin": "listGroups", "types": [...], "states": [...]}
//   {"admin": "describeConsumerGroups", "groups": [...], "authorized_operations": true|false}
//   {"admin": "listConsumerGroupOffsets", "group": G, "partitions": ["topic:partition"] (default: all)}
//   {"admin": "alterConsumerGroupOffsets", "group": G, "offsets": {"topic:partition": offset}}
//   {"admin": "deleteConsumerGroupOffsets", "group": G, "partitions": ["topic:partition"]}
//   {"admin": "deleteConsumerGroups", "groups": [...]}
// An Admin answer is {"result": ...} or {"error": class, "message": text}; per-group and per-partition
// results are keyed, and every list is sorted, so the JSON is the same for the same state.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberAssignment;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.utils.internals.Exit;
import org.apache.kafka.tools.consumer.group.ConsumerGroupCommand;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

public final class GroupTools {
    private static final long TIMEOUT_S = 30;

    private static final class ExitCalled extends RuntimeException {
        final int code;

        ExitCalled(int code) {
            super(null, null, false, false);
            this.code = code;
        }
    }

    public static void main(String[] argv) throws Exception {
        String bootstrap = argv[0];
        ObjectMapper json = new ObjectMapper().enable(SerializationFeature.ORDER_MAP_ENTRIES_BY_KEYS);
        JsonNode steps = json.readTree(System.in);
        PrintStream out = System.out;
        List<Object> answers = new ArrayList<>();
        Exit.setExitProcedure((code, message) -> {
            throw new ExitCalled(code);
        });
        Properties config = new Properties();
        config.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(config)) {
            for (JsonNode step : steps) {
                answers.add(step.has("tool") ? tool(bootstrap, step.get("tool")) : admin(admin, step));
            }
        }
        out.println(json.writeValueAsString(answers));
        out.flush();
    }

    private static Map<String, Object> tool(String bootstrap, JsonNode args) {
        List<String> full = new ArrayList<>(List.of("--bootstrap-server", bootstrap));
        args.forEach(a -> full.add(a.asText()));
        ByteArrayOutputStream stdout = new ByteArrayOutputStream();
        ByteArrayOutputStream stderr = new ByteArrayOutputStream();
        PrintStream out = System.out;
        PrintStream err = System.err;
        int code = 0;
        System.setOut(new PrintStream(stdout, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(stderr, true, StandardCharsets.UTF_8));
        try {
            ConsumerGroupCommand.main(full.toArray(new String[0]));
        } catch (ExitCalled e) {
            code = e.code;
        } finally {
            System.out.flush();
            System.err.flush();
            System.setOut(out);
            System.setErr(err);
        }
        Map<String, Object> answer = new TreeMap<>();
        answer.put("exit", code);
        answer.put("stdout", stdout.toString(StandardCharsets.UTF_8));
        answer.put("stderr", stderr.toString(StandardCharsets.UTF_8));
        return answer;
    }

    private static Map<String, Object> admin(Admin admin, JsonNode step) {
        Map<String, Object> answer = new TreeMap<>();
        try {
            answer.put("result", call(admin, step));
        } catch (ExecutionException e) {
            putError(answer, e.getCause());
        } catch (Exception e) {
            putError(answer, e);
        }
        return answer;
    }

    private static Object call(Admin admin, JsonNode step) throws Exception {
        switch (step.get("admin").asText()) {
            case "listGroups": {
                ListGroupsOptions options = ListGroupsOptions.forConsumerGroups()
                    .withTypes(names(step.get("types"), GroupType::parse))
                    .inGroupStates(names(step.get("states"), GroupState::parse));
                List<Map<String, Object>> listed = new ArrayList<>();
                for (GroupListing g : admin.listGroups(options).all().get(TIMEOUT_S, TimeUnit.SECONDS)) {
                    Map<String, Object> row = new TreeMap<>();
                    row.put("group_id", g.groupId());
                    row.put("type", g.type().map(GroupType::toString).orElse(null));
                    row.put("protocol", g.protocol());
                    row.put("state", g.groupState().map(GroupState::toString).orElse(null));
                    row.put("simple", g.isSimpleConsumerGroup());
                    listed.add(row);
                }
                listed.sort((a, b) -> ((String) a.get("group_id")).compareTo((String) b.get("group_id")));
                return listed;
            }
            case "describeConsumerGroups": {
                var options = new DescribeConsumerGroupsOptions()
                    .includeAuthorizedOperations(step.path("authorized_operations").asBoolean(false));
                return perKey(admin.describeConsumerGroups(strings(step.get("groups")), options).describedGroups(),
                    GroupTools::description);
            }
            case "listConsumerGroupOffsets": {
                ListConsumerGroupOffsetsSpec spec = new ListConsumerGroupOffsetsSpec();
                if (step.has("partitions")) {
                    List<TopicPartition> partitions = new ArrayList<>();
                    step.get("partitions").forEach(p -> partitions.add(partition(p.asText())));
                    spec.topicPartitions(partitions);
                }
                String group = step.get("group").asText();
                return offsets(admin.listConsumerGroupOffsets(Map.of(group, spec))
                    .partitionsToOffsetAndMetadata(group).get(TIMEOUT_S, TimeUnit.SECONDS));
            }
            case "alterConsumerGroupOffsets": {
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                step.get("offsets").fields().forEachRemaining(e ->
                    offsets.put(partition(e.getKey()), new OffsetAndMetadata(e.getValue().asLong())));
                var result = admin.alterConsumerGroupOffsets(step.get("group").asText(), offsets);
                Map<String, KafkaFuture<?>> each = new HashMap<>();
                offsets.keySet().forEach(tp -> each.put(tp.toString(), result.partitionResult(tp)));
                each.put("all", result.all());
                return perKey(each, v -> "ok");
            }
            case "deleteConsumerGroupOffsets": {
                Set<TopicPartition> partitions = new HashSet<>();
                step.get("partitions").forEach(p -> partitions.add(partition(p.asText())));
                var result = admin.deleteConsumerGroupOffsets(step.get("group").asText(), partitions);
                Map<String, KafkaFuture<?>> each = new HashMap<>();
                partitions.forEach(tp -> each.put(tp.toString(), result.partitionResult(tp)));
                each.put("all", result.all());
                return perKey(each, v -> "ok");
            }
            case "deleteConsumerGroups":
                return perKey(admin.deleteConsumerGroups(strings(step.get("groups"))).deletedGroups(), v -> "ok");
            default:
                throw new IllegalArgumentException("unknown step " + step);
        }
    }

    private static <T> Map<String, Object> perKey(Map<String, ? extends KafkaFuture<? extends T>> futures,
                                                  java.util.function.Function<T, Object> render) {
        Map<String, Object> out = new TreeMap<>();
        futures.forEach((key, future) -> {
            Map<String, Object> answer = new TreeMap<>();
            try {
                answer.put("result", render.apply(future.get(TIMEOUT_S, TimeUnit.SECONDS)));
            } catch (ExecutionException e) {
                putError(answer, e.getCause());
            } catch (Exception e) {
                putError(answer, e);
            }
            out.put(key, answer);
        });
        return out;
    }

    private static Object description(ConsumerGroupDescription d) {
        Map<String, Object> out = new TreeMap<>();
        out.put("group_id", d.groupId());
        out.put("simple", d.isSimpleConsumerGroup());
        out.put("type", d.type().toString());
        out.put("state", d.groupState().toString());
        out.put("assignor", d.partitionAssignor());
        out.put("group_epoch", d.groupEpoch().orElse(null));
        out.put("target_assignment_epoch", d.targetAssignmentEpoch().orElse(null));
        if (d.authorizedOperations() != null) {
            List<String> operations = new ArrayList<>();
            d.authorizedOperations().forEach(op -> operations.add(op.toString()));
            operations.sort(null);
            out.put("authorized_operations", operations);
        }
        Map<String, Object> coordinator = new TreeMap<>();
        coordinator.put("node_id", d.coordinator().id());
        coordinator.put("host", d.coordinator().host());
        coordinator.put("port", d.coordinator().port());
        out.put("coordinator", coordinator);
        List<Map<String, Object>> members = new ArrayList<>();
        for (MemberDescription m : d.members()) {
            Map<String, Object> member = new TreeMap<>();
            member.put("member_id", m.consumerId());
            member.put("group_instance_id", m.groupInstanceId().orElse(null));
            member.put("rack_id", m.rackId().orElse(null));
            member.put("client_id", m.clientId());
            member.put("client_host", m.host());
            member.put("assignment", partitions(m.assignment()));
            member.put("target_assignment", m.targetAssignment().map(GroupTools::partitions).orElse(null));
            member.put("member_epoch", m.memberEpoch().orElse(null));
            member.put("upgraded", m.upgraded().orElse(null));
            members.add(member);
        }
        // By client id: what a member is called on both brokers (its member id is random).
        members.sort((a, b) -> ((String) a.get("client_id")).compareTo((String) b.get("client_id")));
        out.put("members", members);
        return out;
    }

    private static List<String> partitions(MemberAssignment assignment) {
        List<String> out = new ArrayList<>();
        assignment.topicPartitions().forEach(tp -> out.add(tp.toString()));
        out.sort(null);
        return out;
    }

    private static Map<String, Object> offsets(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<String, Object> out = new TreeMap<>();
        offsets.forEach((tp, o) -> {
            if (o == null) {
                out.put(tp.toString(), null);
                return;
            }
            Map<String, Object> offset = new TreeMap<>();
            offset.put("offset", o.offset());
            offset.put("metadata", o.metadata());
            offset.put("leader_epoch", o.leaderEpoch().orElse(null));
            out.put(tp.toString(), offset);
        });
        return out;
    }

    private static void putError(Map<String, Object> answer, Throwable e) {
        answer.put("error", e.getClass().getSimpleName());
        answer.put("message", e.getMessage());
    }

    private static TopicPartition partition(String text) {
        int colon = text.lastIndexOf(':');
        return new TopicPartition(text.substring(0, colon), Integer.parseInt(text.substring(colon + 1)));
    }

    private static List<String> strings(JsonNode array) {
        List<String> out = new ArrayList<>();
        array.forEach(n -> out.add(n.asText()));
        return out;
    }

    private static <T> Set<T> names(JsonNode array, java.util.function.Function<String, T> parse) {
        Set<T> out = new HashSet<>();
        if (array != null) {
            array.forEach(n -> out.add(parse.apply(n.asText())));
        }
        return out;
    }

    private GroupTools() {
    }
}
