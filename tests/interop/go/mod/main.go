// Go driver for the interop suite built against current releases from the Go module proxy, pinned in this
// directory's go.mod / go.sum: franz-go (--client franz-go), IBM Sarama (--client ibm-sarama) and
// kafka-go 0.4 (--client kafka-go-0.4). One group member, one producer or one admin query per process, with
// the command line and the JSON lines of tests/interop/drivers/common.py. Built in module mode by
// tests/interop/go_build.py; the GOPATH-mode driver in ../driver covers Debian's older Sarama and kafka-go.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"sync"
	"syscall"
	"time"
)

type options struct {
	client, bootstrap, topic, group, role, assignor, instanceID, clientID, protocolName, debug, groupProtocol string
	sessionTimeoutMs, heartbeatIntervalMs, rebalanceTimeoutMs, stallRevokeMs, count                           int
}

func parseArgs() options {
	var o options
	flag.StringVar(&o.client, "client", "franz-go", "franz-go, ibm-sarama or kafka-go-0.4")
	flag.StringVar(&o.bootstrap, "bootstrap", "", "host:port")
	flag.StringVar(&o.topic, "topic", "", "topic")
	flag.StringVar(&o.group, "group", "interop", "group id")
	flag.StringVar(&o.role, "role", "consumer", "consumer, producer or admin (franz-go: kadm)")
	flag.StringVar(&o.assignor, "assignor", "range", "range, roundrobin or cooperative-sticky")
	flag.StringVar(&o.instanceID, "instance-id", "", "group.instance.id")
	flag.StringVar(&o.clientID, "client-id", "", "client id")
	flag.StringVar(&o.protocolName, "protocol-name", "", "unused (kafkajs only)")
	flag.StringVar(&o.debug, "debug", "", "client debug logging")
	flag.StringVar(&o.groupProtocol, "group-protocol", "classic", "classic, or consumer (KIP-848; franz-go only)")
	flag.IntVar(&o.sessionTimeoutMs, "session-timeout-ms", 6000, "")
	flag.IntVar(&o.heartbeatIntervalMs, "heartbeat-interval-ms", 300, "")
	flag.IntVar(&o.rebalanceTimeoutMs, "rebalance-timeout-ms", 10000, "")
	flag.IntVar(&o.stallRevokeMs, "stall-revoke-ms", 0, "sleep this long in the first revoke that revokes something")
	flag.IntVar(&o.count, "count", 100, "producer: records to write")
	flag.Parse()
	return o
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// moduleVersion is the version of a dependency as the go.mod pinned it, read from the binary's build info.
func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	for _, m := range info.Deps {
		if m.Path == path {
			if m.Replace != nil {
				return m.Replace.Version
			}
			v := m.Version
			if len(v) > 0 && v[0] == 'v' {
				v = v[1:]
			}
			return v
		}
	}
	return "?"
}

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

func newOwnership(stallMs int) *ownership {
	return &ownership{owned: map[int32]bool{}, stallMs: stallMs}
}

func (o *ownership) sortedLocked() []int32 {
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
	fields := map[string]interface{}{"partitions": sortedCopy(parts), "owned": o.sortedLocked()}
	for k, v := range extra {
		fields[k] = v
	}
	emit("assigned", fields)
}

// removed reports partitions revoked (ev "revoked") or lost (ev "lost") and returns how long to stall in
// this callback: the stall is taken once, in the first revoke that revokes something.
func (o *ownership) removed(ev string, parts []int32) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(parts) == 0 {
		return 0
	}
	for _, p := range parts {
		delete(o.owned, p)
	}
	emit(ev, map[string]interface{}{"partitions": sortedCopy(parts), "owned": o.sortedLocked()})
	if ev != "revoked" {
		return 0
	}
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
	if o.groupProtocol != "classic" && o.client != "franz-go" {
		err = fmt.Errorf("%s has no KIP-848 consumer (group.protocol=consumer)", o.client)
	} else {
		switch o.client {
		case "franz-go":
			emit("start", map[string]interface{}{"client": "franz-go", "version": moduleVersion("github.com/twmb/franz-go")})
			switch o.role {
			case "producer":
				err = franzProduce(o)
			case "admin":
				err = franzAdmin(o)
			default:
				err = franzConsume(o)
			}
		case "ibm-sarama":
			emit("start", map[string]interface{}{"client": "ibm-sarama", "version": moduleVersion("github.com/IBM/sarama")})
			if o.role == "producer" {
				err = saramaProduce(o)
			} else {
				err = saramaConsume(o)
			}
		case "kafka-go-0.4":
			emit("start", map[string]interface{}{"client": "kafka-go-0.4", "version": moduleVersion("github.com/segmentio/kafka-go")})
			if o.role == "producer" {
				err = kafkaGoProduce(o)
			} else {
				err = kafkaGoConsume(o)
			}
		default:
			err = fmt.Errorf("unknown client %q", o.client)
		}
	}
	if err != nil {
		emit("error", map[string]interface{}{"error": err.Error()})
		os.Exit(1)
	}
	emit("exit", nil)
}
