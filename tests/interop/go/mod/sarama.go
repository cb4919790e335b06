package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/IBM/sarama"
)

// Sarama picks its request versions from Config.Version, not from the broker's ApiVersions answer. The
// driver keeps the library's default (sarama.DefaultVersion, Kafka 2.8 in 1.61), as an application that
// does not set it does.

func saramaConfig(o options) (*sarama.Config, error) {
	c := sarama.NewConfig()
	c.ClientID = o.clientID
	if c.ClientID == "" {
		c.ClientID = "ibm-sarama"
	}
	c.Metadata.RefreshFrequency = 5 * time.Second
	c.Metadata.Retry.Backoff = 200 * time.Millisecond
	c.Consumer.Return.Errors = true
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
	c.Consumer.MaxWaitTime = 100 * time.Millisecond
	c.Consumer.Group.Session.Timeout = ms(o.sessionTimeoutMs)
	c.Consumer.Group.Heartbeat.Interval = ms(o.heartbeatIntervalMs)
	c.Consumer.Group.Rebalance.Timeout = ms(o.rebalanceTimeoutMs)
	c.Consumer.Group.Rebalance.Retry.Backoff = 200 * time.Millisecond
	switch o.assignor {
	case "range":
		c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	case "roundrobin":
		c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRoundRobin()}
	case "cooperative-sticky":
		c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	default:
		return nil, fmt.Errorf("ibm-sarama: no %s strategy in this driver", o.assignor)
	}
	c.Consumer.Group.InstanceId = o.instanceID
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
	c.Producer.Partitioner = sarama.NewRoundRobinPartitioner
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

// The handler reports each claim: a partition is owned from the start of its ConsumeClaim until it
// returns. Eager strategies end every claim at a rebalance (then Cleanup, then the rejoin); with
// cooperative-sticky the session lives on and only the claims of revoked partitions end, each before the
// follow-up join that hands them to another member.
type saramaHandler struct {
	own *ownership
}

func (h *saramaHandler) Setup(s sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(s sarama.ConsumerGroupSession) error { return nil }

func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	p := claim.Partition()
	h.own.assigned([]int32{p}, map[string]interface{}{"generation": s.GenerationID(), "member_id": s.MemberID()})
	// A slow member sleeps here, in its first revoked claim, before it gives the partition back.
	defer func() { h.own.stall(h.own.removed("revoked", []int32{p})) }()
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			emit("records", map[string]interface{}{"recs": [][2]int64{{int64(msg.Partition), msg.Offset}}})
			s.MarkMessage(msg, "") // committed by the offset manager every AutoCommit.Interval
		case <-s.Context().Done():
			return nil
		}
	}
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
	handler := &saramaHandler{own: newOwnership(o.stallRevokeMs)}
	// Consume returns at the end of each session (an eager rebalance) or on an error: an application calls
	// it again.
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{o.topic}, handler); err != nil {
			emit("poll_error", map[string]interface{}{"error": err.Error()})
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return group.Close() // LeaveGroup for a dynamic member
}
