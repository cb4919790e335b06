package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"regexp"
	"strconv"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

// kafka-go 0.2.1 speaks one fixed set of versions, negotiating nothing (no ApiVersions): message format
// v1 (Produce v2, Fetch v2), Metadata v1, ListOffsets v1, FindCoordinator v0, JoinGroup v1,
// SyncGroup/Heartbeat/LeaveGroup v0, OffsetCommit v2, OffsetFetch v1.

func kafkaGoProduce(o options) error {
	w := kafka.NewWriter(kafka.WriterConfig{
		Brokers: []string{o.bootstrap}, Topic: o.topic, Balancer: &kafka.RoundRobin{},
		BatchTimeout: 10 * time.Millisecond,
		ErrorLogger:  log.New(os.Stderr, "[kafka-go writer] ", log.LstdFlags|log.Lmicroseconds),
	})
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

// The Reader has no rebalance callbacks: its log lines are the only account of its assignment. Its
// consumer-group loop (reader.go, handshake) drops every partition and then logs "rebalancing consumer
// group, G" before each JoinGroup, and logs "subscribed to partitions: map[p:offset ...]" once it reads
// its new assignment. This writer turns those two lines into the driver's revoked/assigned reports (and
// copies every line to stderr).
type kafkaGoLog struct{ own *ownership }

var (
	kafkaGoRebalancing = regexp.MustCompile(`^rebalancing consumer group, `)
	kafkaGoSubscribed  = regexp.MustCompile(`^subscribed to partitions: map\[(.*)\]`)
	kafkaGoPartition   = regexp.MustCompile(`(\d+):-?\d+`)
)

func (l *kafkaGoLog) Write(p []byte) (int, error) {
	os.Stderr.Write(append([]byte("[kafka-go] "), p...))
	line := string(bytes.TrimSpace(p))
	if kafkaGoRebalancing.MatchString(line) {
		l.own.revokeAll()
	} else if m := kafkaGoSubscribed.FindStringSubmatch(line); m != nil {
		parts := []int32{}
		for _, pm := range kafkaGoPartition.FindAllStringSubmatch(m[1], -1) {
			n, _ := strconv.Atoi(pm[1])
			parts = append(parts, int32(n))
		}
		l.own.assigned(parts, nil)
	}
	return len(p), nil
}

func kafkaGoConsume(o options) error {
	var balancer kafka.GroupBalancer
	switch o.assignor {
	case "range":
		balancer = kafka.RangeGroupBalancer{}
	case "roundrobin":
		balancer = kafka.RoundRobinGroupBalancer{}
	default:
		return fmt.Errorf("kafka-go 0.2.1 has no %s group balancer (groupbalancer.go: range and roundrobin)", o.assignor)
	}
	if o.instanceID != "" {
		return fmt.Errorf("kafka-go 0.2.1 has no group.instance.id (static membership, KIP-345)")
	}
	own := newOwnership(0)
	clientID := o.clientID
	if clientID == "" {
		clientID = "kafka-go"
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{o.bootstrap}, GroupID: o.group, Topic: o.topic,
		Dialer:            &kafka.Dialer{ClientID: clientID, Timeout: 10 * time.Second},
		GroupBalancers:    []kafka.GroupBalancer{balancer},
		SessionTimeout:    ms(o.sessionTimeoutMs),
		RebalanceTimeout:  ms(o.rebalanceTimeoutMs),
		HeartbeatInterval: ms(o.heartbeatIntervalMs),
		MaxWait:           100 * time.Millisecond,
		Logger:            log.New(&kafkaGoLog{own: own}, "", 0),
		ErrorLogger:       log.New(os.Stderr, "[kafka-go error] ", log.LstdFlags|log.Lmicroseconds),
	})
	stop := stopSignal()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-stop
		cancel()
	}()
	for ctx.Err() == nil {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() == nil {
				emit("poll_error", map[string]interface{}{"error": err.Error()})
				time.Sleep(200 * time.Millisecond)
			}
			continue
		}
		emit("records", map[string]interface{}{"recs": [][2]int64{{int64(m.Partition), m.Offset}}})
		if err := r.CommitMessages(ctx, m); err != nil && ctx.Err() == nil { // synchronous (CommitInterval 0)
			emit("commit_failed", map[string]interface{}{"error": err.Error()})
		}
	}
	return r.Close() // LeaveGroup
}
