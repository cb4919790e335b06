package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/Shopify/sarama"
)

// Sarama 1.22 speaks the protocol of the Kafka version it is configured for; 2.1 is the oldest a Kafka 4
// broker still serves (KIP-896). At 2.1 it sends record batches (Produce v3, Fetch v4), Metadata v5,
// FindCoordinator v0, JoinGroup v1, SyncGroup/Heartbeat/LeaveGroup v0, OffsetFetch v1 and, with no offset
// retention configured, OffsetCommit v1 (its offset manager, every CommitInterval).
var saramaKafkaVersion = sarama.V2_1_0_0

func saramaConfig(o options) (*sarama.Config, error) {
	c := sarama.NewConfig()
	c.Version = saramaKafkaVersion
	c.ClientID = o.clientID
	if c.ClientID == "" {
		c.ClientID = "sarama"
	}
	c.Metadata.RefreshFrequency = 5 * time.Second
	c.Metadata.Retry.Backoff = 200 * time.Millisecond
	c.Consumer.Return.Errors = true
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.CommitInterval = 200 * time.Millisecond
	c.Consumer.MaxWaitTime = 100 * time.Millisecond
	c.Consumer.Group.Session.Timeout = ms(o.sessionTimeoutMs)
	c.Consumer.Group.Heartbeat.Interval = ms(o.heartbeatIntervalMs)
	c.Consumer.Group.Rebalance.Timeout = ms(o.rebalanceTimeoutMs)
	c.Consumer.Group.Rebalance.Retry.Backoff = 200 * time.Millisecond
	switch o.assignor {
	case "range":
		c.Consumer.Group.Rebalance.Strategy = sarama.BalanceStrategyRange
	case "roundrobin":
		c.Consumer.Group.Rebalance.Strategy = sarama.BalanceStrategyRoundRobin
	default:
		return nil, fmt.Errorf("sarama 1.22 has no %s strategy (balance_strategy.go: range and roundrobin)", o.assignor)
	}
	if o.instanceID != "" {
		return nil, fmt.Errorf("sarama 1.22 has no group.instance.id (static membership, KIP-345)")
	}
	c.Producer.Return.Successes = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	return c, nil
}

func saramaProduce(o options) error {
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	c, err := saramaConfig(options{clientID: o.clientID, assignor: "range", sessionTimeoutMs: 10000,
		heartbeatIntervalMs: 3000, rebalanceTimeoutMs: 10000})
	if err != nil {
		return err
	}
	producer, err := sarama.NewSyncProducer([]string{o.bootstrap}, c)
	if err != nil {
		return err
	}
	msgs := make([]*sarama.ProducerMessage, o.count)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: o.topic, Value: sarama.StringEncoder(fmt.Sprintf("v%d", i))}
	}
	if err := producer.SendMessages(msgs); err != nil {
		return err
	}
	if err := producer.Close(); err != nil {
		return err
	}
	emit("produced", map[string]interface{}{"count": o.count})
	return nil
}

type saramaHandler struct {
	topic string
	own   *ownership
}

// Setup runs when a session starts, with the assignment of the new generation.
func (h *saramaHandler) Setup(s sarama.ConsumerGroupSession) error {
	h.own.assigned(s.Claims()[h.topic], map[string]interface{}{"generation": s.GenerationID(), "member_id": s.MemberID()})
	return nil
}

// Cleanup runs when the session ends (every rebalance: Sarama is eager), before its offsets are committed
// and before it rejoins: a slow member sleeps here.
func (h *saramaHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	h.own.stall(h.own.revokeAll())
	return nil
}

func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		emit("records", map[string]interface{}{"recs": [][2]int64{{int64(msg.Partition), msg.Offset}}})
		s.MarkMessage(msg, "") // committed by the offset manager every CommitInterval
	}
	return nil
}

func saramaConsume(o options) error {
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	c, err := saramaConfig(o)
	if err != nil {
		return err
	}
	group, err := sarama.NewConsumerGroup([]string{o.bootstrap}, o.group, c)
	if err != nil {
		return err
	}
	go func() {
		for err := range group.Errors() {
			emit("poll_error", map[string]interface{}{"error": err.Error()})
		}
	}()
	stop := stopSignal()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-stop
		cancel()
	}()
	handler := &saramaHandler{topic: o.topic, own: newOwnership(o.stallRevokeMs)}
	// Consume returns at the end of each session (a rebalance) or on an error: an application calls it again.
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{o.topic}, handler); err != nil {
			emit("poll_error", map[string]interface{}{"error": err.Error()})
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return group.Close() // LeaveGroup
}
