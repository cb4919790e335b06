package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// franz-go negotiates every request version from the broker's ApiVersions answer, so it speaks the newest
// versions both sides know. Its group consumer runs the classic protocol with the balancer chosen here, or
// KIP-848's (ServerSideBalancer) when the broker serves ConsumerGroupHeartbeat v1 and the first balancer is
// its range or sticky one: the coordinator then assigns with "range" or "uniform" (consumer_group_848.go).

func franzLogger(o options) kgo.Opt {
	level := kgo.LogLevelInfo
	if o.debug != "" {
		level = kgo.LogLevelDebug
	}
	return kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, func() string {
		return time.Now().Format("15:04:05.000000 ") + "[franz-go] "
	}))
}

func franzBase(o options) []kgo.Opt {
	clientID := o.clientID
	if clientID == "" {
		clientID = "franz-go"
	}
	return []kgo.Opt{kgo.SeedBrokers(o.bootstrap), kgo.ClientID(clientID), franzLogger(o),
		kgo.RetryBackoffFn(func(int) time.Duration { return 200 * time.Millisecond })}
}

func franzProduce(o options) error {
	cl, err := kgo.NewClient(append(franzBase(o), kgo.DefaultProduceTopic(o.topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, o.count)
	for i := range recs {
		recs[i] = &kgo.Record{Value: []byte(fmt.Sprintf("v%d", i))}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return err
	}
	emit("produced", map[string]interface{}{"count": o.count})
	return nil
}

func franzConsume(o options) error {
	var balancer kgo.GroupBalancer
	switch o.assignor {
	case "range":
		balancer = kgo.RangeBalancer()
	case "roundrobin":
		balancer = kgo.RoundRobinBalancer()
	case "cooperative-sticky":
		balancer = kgo.CooperativeStickyBalancer()
	default:
		return fmt.Errorf("franz-go: no %s balancer in this driver", o.assignor)
	}
	own := newOwnership(o.stallRevokeMs)
	opts := append(franzBase(o),
		kgo.ConsumeTopics(o.topic),
		kgo.ConsumerGroup(o.group),
		kgo.Balancers(balancer),
		kgo.SessionTimeout(ms(o.sessionTimeoutMs)),
		kgo.HeartbeatInterval(ms(o.heartbeatIntervalMs)),
		kgo.RebalanceTimeout(ms(o.rebalanceTimeoutMs)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond),
		// Autocommit commits what earlier polls returned (records handed to the application and processed
		// before it polled again), every 200 ms.
		kgo.AutoCommitInterval(200*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			member, generation := cl.GroupMetadata()
			own.assigned(m[o.topic], map[string]interface{}{"generation": generation, "member_id": member})
		}),
		// Setting this callback replaces kgo's default one, which is a blocking commit of what was
		// processed; so the commit is done here before the partitions are given up.
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			if len(m[o.topic]) > 0 {
				if err := cl.CommitUncommittedOffsets(ctx); err != nil {
					emit("commit_failed", map[string]interface{}{"error": err.Error()})
				}
			}
			own.stall(own.removed("revoked", m[o.topic]))
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			own.removed("lost", m[o.topic])
		}),
	)
	if o.instanceID != "" {
		opts = append(opts, kgo.InstanceID(o.instanceID))
	}
	if o.groupProtocol == "consumer" {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	stop := stopSignal()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-stop
		cancel()
	}()
	for ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		if fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			if ctx.Err() == nil {
				emit("poll_error", map[string]interface{}{"error": fmt.Sprintf("%s[%d]: %v", t, p, err)})
			}
		})
		recs := [][2]int64{}
		fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, [2]int64{int64(r.Partition), r.Offset}) })
		if len(recs) > 0 {
			emit("records", map[string]interface{}{"recs": recs})
		}
	}
	// Leaving commits in the revoke callback, then sends LeaveGroup (a dynamic classic member) or KIP-848's
	// leave heartbeat; LeaveGroupContext, unlike Close, reports how the leave went.
	leaveCtx, leaveCancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer leaveCancel()
	if err := cl.LeaveGroupContext(leaveCtx); err != nil {
		emit("leave_failed", map[string]interface{}{"error": err.Error()})
	}
	cl.Close()
	return nil
}

// franzAdmin lists the groups and describes --group with kadm: the classic DescribeGroups and, for a
// KIP-848 group, ConsumerGroupDescribe. One "admin" line each.
func franzAdmin(o options) error {
	cl, err := kgo.NewClient(franzBase(o)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("ListGroups: %w", err)
	}
	groups := []map[string]interface{}{}
	for _, g := range listed.Sorted() {
		groups = append(groups, map[string]interface{}{"group": g.Group, "state": g.State,
			"protocol_type": g.ProtocolType, "group_type": g.GroupType})
	}
	emit("admin", map[string]interface{}{"op": "list_groups", "groups": groups})

	// Each describe answers for one kind of group: the other kind comes back as an error, which is reported.
	described, err := adm.DescribeGroups(ctx, o.group)
	if err != nil {
		emit("admin", map[string]interface{}{"op": "describe_groups", "error": err.Error()})
	} else {
		d := described[o.group]
		members := []map[string]interface{}{}
		for _, m := range d.Members {
			parts := []int32{}
			if c, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range c.Topics {
					if t.Topic == o.topic {
						parts = append(parts, t.Partitions...)
					}
				}
			}
			members = append(members, map[string]interface{}{"member_id": m.MemberID, "client_id": m.ClientID,
				"instance_id": m.InstanceID, "partitions": sortedCopy(parts)})
		}
		fields := map[string]interface{}{"op": "describe_groups", "group": d.Group, "state": d.State,
			"protocol": d.Protocol, "protocol_type": d.ProtocolType, "members": members}
		if d.Err != nil {
			fields["error"] = d.Err.Error()
		}
		emit("admin", fields)
	}

	consumer, err := adm.DescribeConsumerGroups(ctx, o.group)
	if err != nil {
		emit("admin", map[string]interface{}{"op": "describe_consumer_groups", "error": err.Error()})
		return nil
	}
	c := consumer[o.group]
	cmembers := []map[string]interface{}{}
	for _, m := range c.Members {
		parts := []int32{}
		for p := range m.Assignment[o.topic] {
			parts = append(parts, p)
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		cmembers = append(cmembers, map[string]interface{}{"member_id": m.MemberID, "client_id": m.ClientID,
			"instance_id": m.InstanceID, "member_epoch": m.MemberEpoch, "partitions": parts})
	}
	cfields := map[string]interface{}{"op": "describe_consumer_groups", "group": c.Group, "state": c.State,
		"epoch": c.Epoch, "assignor": c.AssignorName, "members": cmembers}
	if c.Err != nil {
		cfields["error"] = c.Err.Error()
	}
	emit("admin", cfields)
	return nil
}
