// Go driver for the interop suite: Sarama (--client sarama) and kafka-go (--client kafka-go), one group
// member or one producer per process, with the command line and the JSON lines of
// tests/interop/drivers/common.py. Built in GOPATH mode against Debian's packaged sources
// (golang-github-shopify-sarama-dev, golang-github-segmentio-kafka-go-dev) by tests/interop/go_build.py.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"
)

// Set at build time (-ldflags -X) from the Debian packages' versions.
var (
	saramaVersion  = "?"
	kafkaGoVersion = "?"
)

type options struct {
	client, bootstrap, topic, group, role, assignor, instanceID, clientID, protocolName, debug string
	sessionTimeoutMs, heartbeatIntervalMs, rebalanceTimeoutMs, stallRevokeMs, count        int
}

func parseArgs() options {
	var o options
	flag.StringVar(&o.client, "client", "sarama", "sarama or kafka-go")
	flag.StringVar(&o.bootstrap, "bootstrap", "", "host:port")
	flag.StringVar(&o.topic, "topic", "", "topic")
	flag.StringVar(&o.group, "group", "interop", "group id")
	flag.StringVar(&o.role, "role", "consumer", "consumer or producer")
	flag.StringVar(&o.assignor, "assignor", "range", "range, roundrobin or cooperative-sticky")
	flag.StringVar(&o.instanceID, "instance-id", "", "group.instance.id")
	flag.StringVar(&o.clientID, "client-id", "", "client id")
	flag.StringVar(&o.protocolName, "protocol-name", "", "unused (kafkajs only)")
	flag.StringVar(&o.debug, "debug", "", "client debug logging")
	flag.IntVar(&o.sessionTimeoutMs, "session-timeout-ms", 6000, "")
	flag.IntVar(&o.heartbeatIntervalMs, "heartbeat-interval-ms", 300, "")
	flag.IntVar(&o.rebalanceTimeoutMs, "rebalance-timeout-ms", 10000, "")
	flag.IntVar(&o.stallRevokeMs, "stall-revoke-ms", 0, "sleep this long in the first revoke that revokes something")
	flag.IntVar(&o.count, "count", 100, "producer: records to write")
	flag.Parse()
	return o
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

var emitLock sync.Mutex

func emit(ev string, fields map[string]interface{}) {
	line := map[string]interface{}{"t": float64(time.Now().UnixNano()) / 1e9, "ev": ev}
	for k, v := range fields {
		line[k] = v
	}
	b, err := json.Marshal(line)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"ev":"error","error":%q}`, err.Error()))
	}
	emitLock.Lock()
	defer emitLock.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

// ownership is the set of partitions the member owns, as its library's rebalance hooks report it.
type ownership struct {
	mu      sync.Mutex
	owned   map[int32]bool
	stallMs int
}

func newOwnership(stallMs int) *ownership { return &ownership{owned: map[int32]bool{}, stallMs: stallMs} }

func (o *ownership) sorted() []int32 {
	out := []int32{}
	for p := range o.owned {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (o *ownership) assigned(parts []int32, extra map[string]interface{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range parts {
		o.owned[p] = true
	}
	fields := map[string]interface{}{"partitions": sortedCopy(parts), "owned": o.sorted()}
	for k, v := range extra {
		fields[k] = v
	}
	emit("assigned", fields)
}

// revokeAll reports every owned partition revoked (both libraries rebalance eagerly) and returns how long
// to stall in this revoke (once, and only when something was revoked).
func (o *ownership) revokeAll() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	parts := o.sorted()
	if len(parts) == 0 {
		return 0
	}
	o.owned = map[int32]bool{}
	emit("revoked", map[string]interface{}{"partitions": parts, "owned": []int32{}})
	stall := ms(o.stallMs)
	o.stallMs = 0
	return stall
}

func (o *ownership) stall(d time.Duration) {
	if d > 0 {
		emit("stall", map[string]interface{}{"ms": d.Milliseconds()})
		time.Sleep(d)
		emit("stall_end", nil)
	}
}

func sortedCopy(parts []int32) []int32 {
	out := append([]int32{}, parts...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// stopSignal is closed on SIGTERM / SIGINT: the driver then closes its client (LeaveGroup) and exits.
func stopSignal() <-chan struct{} {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		<-ch
		close(done)
	}()
	return done
}

func main() {
	o := parseArgs()
	var err error
	switch o.client {
	case "sarama":
		emit("start", map[string]interface{}{"client": "sarama", "version": saramaVersion})
		if o.role == "producer" {
			err = saramaProduce(o)
		} else {
			err = saramaConsume(o)
		}
	case "kafka-go":
		emit("start", map[string]interface{}{"client": "kafka-go", "version": kafkaGoVersion})
		if o.role == "producer" {
			err = kafkaGoProduce(o)
		} else {
			err = kafkaGoConsume(o)
		}
	default:
		err = fmt.Errorf("unknown client %q", o.client)
	}
	if err != nil {
		emit("error", map[string]interface{}{"error": err.Error()})
		os.Exit(1)
	}
	emit("exit", nil)
}
