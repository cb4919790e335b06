"""The controller's decisions, as Kafka's (kafka.controller.Election and AdminUtils): where replicas go when
a topic is created, who leads a partition when its leader is gone or shutting down, and what the ISR
becomes. Pure functions over plain values.
"""
from __future__ import annotations

from coordinator_server.cluster.zk_layout import NO_LEADER, LeaderAndIsr


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int, start_index: int = 0,
                    replica_shift: int = 0) -> dict[int, list[int]]:
    """Kafka's assignReplicasToBrokers without racks: partition p's first replica (its preferred leader)
    walks the sorted brokers from `start_index`, so leaders spread evenly; the others follow at a shift
    that grows each time the walk wraps around, so followers spread too."""
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} is larger than the {n} available brokers")
    out: dict[int, list[int]] = {}
    shift = replica_shift
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out


def offline_leader(current: LeaderAndIsr, replicas: list[int], live: set[int], unclean: bool,
                   controller_epoch: int) -> tuple[LeaderAndIsr, bool]:
    """Kafka's offlinePartitionLeaderElection: the first replica, in assignment order, that is alive and in
    the ISR; with unclean election allowed, else the first live replica (and the ISR is just it). With no
    candidate the partition goes offline (leader -1) and keeps its ISR, so the last in-sync replica can be
    elected when it returns. The leader epoch moves on either way. Returns (new state, unclean?)."""
    live_isr = [r for r in replicas if r in live and r in current.isr]
    if live_isr:
        leader = live_isr[0]
        isr = tuple(r for r in current.isr if r in live)
        return LeaderAndIsr(leader, current.leader_epoch + 1, isr, controller_epoch), False
    if unclean:
        live_replicas = [r for r in replicas if r in live]
        if live_replicas:
            leader = live_replicas[0]
            return LeaderAndIsr(leader, current.leader_epoch + 1, (leader,), controller_epoch), True
    return LeaderAndIsr(NO_LEADER, current.leader_epoch + 1, current.isr, controller_epoch), False


def controlled_shutdown_leader(current: LeaderAndIsr, replicas: list[int], live: set[int],
                               shutting_down: set[int], controller_epoch: int) -> LeaderAndIsr | None:
    """Kafka's controlledShutdownPartitionLeaderElection: the first live ISR replica not shutting down; the
    ISR loses the shutting-down brokers. None when nobody can take over (the broker keeps leading)."""
    candidates = [r for r in replicas if r in current.isr and r in live and r not in shutting_down]
    if not candidates:
        return None
    isr = tuple(r for r in current.isr if r not in shutting_down)
    return LeaderAndIsr(candidates[0], current.leader_epoch + 1, isr, controller_epoch)


def without_follower(current: LeaderAndIsr, broker: int, controller_epoch: int) -> LeaderAndIsr | None:
    """A follower went offline (or is shutting down): it leaves the ISR. The leader epoch stays (as KRaft
    does, unlike ZooKeeper-mode Kafka, which bumped it): the leader keeps leading and its groups stay loaded;
    the znode version alone orders the change against the leader's own ISR writes. None when it was not in
    the ISR, or is the leader, or is the last member (Kafka never empties an ISR)."""
    if broker == current.leader or broker not in current.isr or len(current.isr) <= 1:
        return None
    return LeaderAndIsr(current.leader, current.leader_epoch, tuple(r for r in current.isr if r != broker),
                        controller_epoch)
