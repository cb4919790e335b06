package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

// kafka-go 0.4 negotiates request versions from ApiVersions. Its Reader hides the group behind
// FetchMessage; this driver uses the ConsumerGroup API under it instead, which hands the application each
// generation with its assignment (ConsumerGroup.Next) and ends it by cancelling the functions the
// application started in it (Generation.Start): the next JoinGroup waits until every one has returned,
// so their return is the revoke. Each partition is read by a partition Reader from the offset the
// generation carries (the committed one, or the first), and committed through the generation after
// each record.

func kafkaGoProduce(o options) error {
	w := &kafka.Writer{
		Addr: kafka.TCP(o.bootstrap), Topic: o.topic, Balancer: &kafka.RoundRobin{},
		BatchTimeout: 10 * time.Millisecond, RequiredAcks: kafka.RequireAll,
		ErrorLogger: log.New(os.Stderr, "[kafka-go writer] ", log.LstdFlags|log.Lmicroseconds),
	}
	msgs := make([]kafka.Message, o.count)
	for i := range msgs {
		msgs[i] = kafka.Message{Value: []byte(fmt.Sprintf("v%d", i))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	emit("produced", map[string]interface{}{"count": o.count})
	return nil
}

func kafkaGoConsume(o options) error {
	var balancer kafka.GroupBalancer
	switch o.assignor {
	case "range":
		balancer = kafka.RangeGroupBalancer{}
	case "roundrobin":
		balancer = kafka.RoundRobinGroupBalancer{}
	default:
		return fmt.Errorf("kafka-go 0.4 has no %s group balancer (groupbalancer.go: range, roundrobin, rack affinity)", o.assignor)
	}
	if o.instanceID != "" {
		return fmt.Errorf("kafka-go 0.4 has no group.instance.id (ConsumerGroupConfig: static membership, KIP-345)")
	}
	clientID := o.clientID
	if clientID == "" {
		clientID = "kafka-go"
	}
	dialer := &kafka.Dialer{ClientID: clientID, Timeout: 10 * time.Second}
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: o.group, Brokers: []string{o.bootstrap}, Dialer: dialer, Topics: []string{o.topic},
		GroupBalancers:    []kafka.GroupBalancer{balancer},
		SessionTimeout:    ms(o.sessionTimeoutMs),
		RebalanceTimeout:  ms(o.rebalanceTimeoutMs),
		HeartbeatInterval: ms(o.heartbeatIntervalMs),
		JoinGroupBackoff:  200 * time.Millisecond,
		StartOffset:       kafka.FirstOffset,
		Logger:            log.New(os.Stderr, "[kafka-go] ", log.LstdFlags|log.Lmicroseconds),
		ErrorLogger:       log.New(os.Stderr, "[kafka-go error] ", log.LstdFlags|log.Lmicroseconds),
	})
	if err != nil {
		return err
	}
	own := newOwnership(o.stallRevokeMs)
	stop := stopSignal()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-stop
		cancel()
	}()
	for ctx.Err() == nil {
		gen, err := group.Next(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, kafka.ErrGroupClosed) {
				emit("poll_error", map[string]interface{}{"error": err.Error()})
			}
			continue
		}
		parts := []int32{}
		for _, a := range gen.Assignments[o.topic] {
			parts = append(parts, int32(a.ID))
		}
		own.assigned(parts, map[string]interface{}{"generation": gen.ID, "member_id": gen.MemberID})
		var commitMu sync.Mutex
		for _, a := range gen.Assignments[o.topic] {
			partition, offset := a.ID, a.Offset
			gen.Start(func(gctx context.Context) {
				kafkaGoReadPartition(gctx, o, dialer, gen, &commitMu, partition, offset)
				own.stall(own.removed("revoked", []int32{int32(partition)}))
			})
		}
	}
	return group.Close() // ends the generation, then LeaveGroup
}

// kafkaGoReadPartition reads one partition until the generation ends. A failed read or commit is retried
// (the generation's context ends it when the member must rejoin); returning early would end the
// generation for every partition.
func kafkaGoReadPartition(ctx context.Context, o options, dialer *kafka.Dialer, gen *kafka.Generation,
	commitMu *sync.Mutex, partition int, offset int64) {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{o.bootstrap}, Topic: o.topic, Partition: partition, Dialer: dialer,
		MaxWait:     100 * time.Millisecond,
		ErrorLogger: log.New(os.Stderr, fmt.Sprintf("[kafka-go reader %d] ", partition), log.LstdFlags|log.Lmicroseconds),
	})
	defer r.Close()
	if err := r.SetOffset(offset); err != nil {
		emit("poll_error", map[string]interface{}{"error": err.Error()})
	}
	for ctx.Err() == nil {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if ctx.Err() == nil {
				emit("poll_error", map[string]interface{}{"error": err.Error()})
				time.Sleep(200 * time.Millisecond)
			}
			continue
		}
		emit("records", map[string]interface{}{"recs": [][2]int64{{int64(m.Partition), m.Offset}}})
		// A failed commit (REBALANCE_IN_PROGRESS, the coordinator unreachable) is retried while the
		// generation lasts; once it ends, the next owner reads from the last commit that went through.
		for ctx.Err() == nil {
			commitMu.Lock()
			err = gen.CommitOffsets(map[string]map[int]int64{o.topic: {partition: m.Offset + 1}})
			commitMu.Unlock()
			if err == nil {
				break
			}
			emit("commit_failed", map[string]interface{}{"error": err.Error(), "retry": ctx.Err() == nil})
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}
