"""The rebalance explainer's logic: why a group rebalanced, when, and who made it wait — one
`Explanation` per generation, from two sources, neither of which needs Spark here.

- The group's GroupMetadata records (`log.group_metadata`), in log order: each generation's members
  (member id, instance id, client id, subscription), leader and protocol; the time its join phase
  completed (the record's `state_timestamp`: the group entered CompletingRebalance then) and the time
  the leader's assignment was appended (the record's timestamp). From these alone: the generations, their
  times, how long the sync phase took, and the membership diff (joined, left, replaced, subscription
  changed) — not the cause: a member that left looks the same whether it sent LeaveGroup, crashed or
  missed the rebalance timeout, and what started the rebalance is not written anywhere.
- The server's JSON log (`--log-format json`), lines about the group: `preparing_rebalance` (the trigger
  and the member that caused it), `member_removed` (each removal's cause), `join_completed` /
  `group_empty` (how long the join phase lasted, how it ended, who arrived last and who never did),
  `group_stable` (how long the group was not consuming) and `static_member_replaced`. Fields:
  coordinator_server/group/rebalance_trace.py.

Lines are matched to a generation by the generation they name and by time: a server names the generation
a group is leaving when a rebalance starts, and the one it reached when the join completes. A group that
is deleted and created again starts again at generation 0; records are walked in log order, so each
incarnation is explained on its own, and a log line is taken from the window between the previous
generation and this one.

The Spark side (collecting the rows, reading the logs, writing Parquet) is `pipeline.explain_job`.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# A log line's time and a record's come from different reads of the same wall clock (the server's log
# processor and its append path): allow this much between them when matching.
SLACK_MS = 1000

SERVER_LOG_EVENTS = ("preparing_rebalance", "member_removed", "join_completed", "group_empty", "group_stable",
                     "static_member_replaced")


@dataclass(frozen=True)
class Member:
    member_id: str
    group_instance_id: str | None = None
    client_id: str | None = None
    subscribed_topics: tuple[str, ...] | None = None

    @property
    def key(self) -> str:
        # As the rebalances job: a static member is its instance id across member ids.
        return self.group_instance_id or self.member_id


@dataclass(frozen=True)
class GroupRecord:
    """One GroupMetadata record of the group on one node; `timestamp_ms` is when it was appended."""

    node: str
    group: str
    log_partition: int
    offset: int
    timestamp_ms: int
    tombstone: bool = False
    generation: int | None = None
    protocol: str | None = None
    leader: str | None = None
    state_timestamp_ms: int | None = None
    members: tuple[Member, ...] = ()


@dataclass(frozen=True)
class ServerEvent:
    """One JSON log line about a group: its event name, time, the generation it names, its fields."""

    group: str
    event: str
    time_ms: int
    generation: int | None
    fields: Mapping[str, Any] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        return self.fields.get(name)


@dataclass
class MemberChange:
    member_id: str
    group_instance_id: str | None
    client_id: str | None
    cause: str | None = None  # left: leave, session_expiry, rebalance_timeout, ... (server log only)
    old_member_id: str | None = None  # replaced: the static member's previous id


@dataclass
class Explanation:
    node: str
    group: str
    generation: int
    rebalanced: bool  # False: a static member swapped in place, the generation and assignment unchanged
    cause_source: str  # "server log" or "log segments"
    trigger: str | None = None
    trigger_member_id: str | None = None
    trigger_client_id: str | None = None
    trigger_instance_id: str | None = None
    reason: str | None = None
    rebalance_start_ms: int | None = None
    join_completed_ms: int | None = None
    assigned_ms: int | None = None
    join_ms: int | None = None
    sync_ms: int | None = None
    not_consuming_ms: int | None = None
    ended_by: str | None = None
    last_joined_member_id: str | None = None
    last_joined_client_id: str | None = None
    last_joined_after_ms: int | None = None
    not_rejoined: list[MemberChange] = field(default_factory=list)
    leader: str | None = None
    protocol: str | None = None
    member_count: int = 0
    joined: list[MemberChange] = field(default_factory=list)
    left: list[MemberChange] = field(default_factory=list)
    replaced: list[MemberChange] = field(default_factory=list)
    subscription_changed: list[MemberChange] = field(default_factory=list)
    in_segments: bool = True

    def as_row(self) -> dict[str, Any]:
        row = dict(self.__dict__)
        for name in ("not_rejoined", "joined", "left", "replaced", "subscription_changed"):
            row[name] = [c.__dict__ for c in row[name]]
        return row


# ------------------------------------------------------------------------------------------- explain


def explain(records: Iterable[GroupRecord], events: Iterable[ServerEvent]) -> list[Explanation]:
    """Every generation (and in-place static replacement) of the records' groups, per node, in log order."""
    events = sorted(events, key=lambda e: e.time_ms)
    by_timeline: dict[tuple[str, str], list[GroupRecord]] = {}
    for r in records:
        by_timeline.setdefault((r.node, r.group), []).append(r)
    out: list[Explanation] = []
    # Several nodes' logs can hold the same group (replicas in a cluster, or unrelated servers): every
    # server log is offered to every node's timeline, matched by generation and time.
    for (_, group), timeline in sorted(by_timeline.items()):
        timeline.sort(key=lambda r: (r.log_partition, r.offset))
        out.extend(_explain_timeline(timeline, [e for e in events if e.group == group]))
    return out


def _explain_timeline(records: list[GroupRecord], events: list[ServerEvent]) -> list[Explanation]:
    out: list[Explanation] = []
    previous: GroupRecord | None = None  # the latest record of the previous generation, or this one so far
    previous_join_ms: int | None = None
    for record in records:
        if record.tombstone:
            previous, previous_join_ms = None, None  # deleted: the next record starts a new incarnation
            continue
        if previous is not None and record.generation == previous.generation:
            out.extend(_in_place_changes(previous, record, events))
            previous = record
            continue
        explanation = _generation(record, previous, previous_join_ms, events)
        out.append(explanation)
        previous, previous_join_ms = record, explanation.join_completed_ms
    return out


def _generation(record: GroupRecord, previous: GroupRecord | None, lower_ms: int | None,
                events: Sequence[ServerEvent]) -> Explanation:
    g = record.generation if record.generation is not None else -1
    e = Explanation(record.node, record.group, g, rebalanced=g > 0, cause_source="log segments",
                    leader=record.leader, protocol=record.protocol, member_count=len(record.members))
    # From the record: the join completed when the group entered CompletingRebalance (or Empty) — the
    # state time it carries — and the leader's assignment was handed out when it was appended.
    if record.state_timestamp_ms is not None and record.state_timestamp_ms >= 0:
        e.join_completed_ms = record.state_timestamp_ms
        e.sync_ms = max(record.timestamp_ms - record.state_timestamp_ms, 0) if record.members else None
    e.assigned_ms = record.timestamp_ms if record.members else None
    _diff(e, previous.members if previous is not None else (), record.members)
    if g == 0:
        e.trigger = "group_created"  # the first JoinGroup records the Empty group; no rebalance yet
    _apply_server_log(e, record, lower_ms, events)
    return e


def _diff(e: Explanation, before: Sequence[Member], after: Sequence[Member]) -> None:
    old = {m.key: m for m in before}
    new = {m.key: m for m in after}
    for key, m in new.items():
        was = old.get(key)
        if was is None:
            e.joined.append(MemberChange(m.member_id, m.group_instance_id, m.client_id))
            continue
        if was.member_id != m.member_id:
            e.replaced.append(MemberChange(m.member_id, m.group_instance_id, m.client_id, old_member_id=was.member_id))
        if (was.subscribed_topics is not None and m.subscribed_topics is not None
                and sorted(was.subscribed_topics) != sorted(m.subscribed_topics)):
            e.subscription_changed.append(MemberChange(m.member_id, m.group_instance_id, m.client_id))
    e.left = [MemberChange(m.member_id, m.group_instance_id, m.client_id) for k, m in old.items() if k not in new]


def _in_place_changes(before: GroupRecord, after: GroupRecord, events: Sequence[ServerEvent]) -> list[Explanation]:
    """A record rewritten within a generation: a static member replaced without a rebalance (the group
    was Stable and the new member's protocols matched), which the segments show as a new member id."""
    probe = Explanation(after.node, after.group, after.generation or 0, rebalanced=False, cause_source="log segments")
    _diff(probe, before.members, after.members)
    out = []
    for change in probe.replaced:
        e = Explanation(after.node, after.group, after.generation or 0, rebalanced=False,
                        cause_source="log segments", trigger="static_member_replaced",
                        trigger_member_id=change.member_id, trigger_client_id=change.client_id,
                        trigger_instance_id=change.group_instance_id, assigned_ms=after.timestamp_ms,
                        not_consuming_ms=0, leader=after.leader, protocol=after.protocol,
                        member_count=len(after.members), replaced=[change])
        logged = _latest(events, "static_member_replaced", after.generation, None, after.timestamp_ms + SLACK_MS,
                         member_id=change.member_id)
        if logged is not None:
            e.cause_source = "server log"
            e.reason = f"replaced {logged.get('old_member_id')} (client {logged.get('old_client_id')})"
        out.append(e)
    return out


def _apply_server_log(e: Explanation, record: GroupRecord, lower_ms: int | None,
                      events: Sequence[ServerEvent]) -> None:
    g = e.generation
    upper = record.timestamp_ms + SLACK_MS
    lower = None if lower_ms is None else lower_ms - SLACK_MS
    joined = _latest(events, ("join_completed", "group_empty"), g, lower, upper)
    start_upper = joined.time_ms + SLACK_MS if joined is not None else upper
    started = _latest(events, "preparing_rebalance", g - 1, lower, start_upper)
    if started is None and joined is None:
        return
    e.cause_source = "server log"
    if started is not None:
        e.trigger = started.get("trigger")
        e.trigger_member_id = started.get("member_id")
        e.trigger_client_id = started.get("client_id")
        e.trigger_instance_id = started.get("group_instance_id")
        e.reason = started.get("reason")
        e.rebalance_start_ms = started.time_ms
    if joined is not None:
        e.trigger = e.trigger or joined.get("trigger")
        e.join_completed_ms = joined.time_ms
        e.join_ms = joined.get("join_ms")
        e.ended_by = joined.get("ended_by")
        e.last_joined_member_id = joined.get("last_joined_member_id")
        e.last_joined_client_id = joined.get("last_joined_client_id")
        e.last_joined_after_ms = joined.get("last_joined_after_ms")
        if e.rebalance_start_ms is None and joined.get("rebalance_ms") is not None:
            e.rebalance_start_ms = joined.time_ms - int(joined.get("rebalance_ms"))
    removed = {ev.get("member_id"): ev for ev in _window(events, "member_removed", g - 1, lower,
                                                         joined.time_ms + SLACK_MS if joined else upper)}
    for change in e.left:
        ev = removed.get(change.member_id)
        if ev is not None:
            change.cause = ev.get("cause")
    if joined is not None:
        # Dynamic members that never rejoined were removed (they are in `left`); static ones are kept.
        known = {c.member_id: c for c in e.left}
        kept = {m.member_id: m for m in record.members}
        e.not_rejoined = [known.get(m) or MemberChange(m, kept[m].group_instance_id if m in kept else None,
                                                       kept[m].client_id if m in kept else None)
                          for m in joined.get("not_rejoined") or []]
    stable = _earliest(events, "group_stable", g, (joined.time_ms if joined else record.timestamp_ms) - SLACK_MS)
    if stable is not None:
        e.assigned_ms = stable.time_ms
        e.sync_ms = stable.get("sync_ms") if stable.get("sync_ms") is not None else e.sync_ms
        e.not_consuming_ms = stable.get("rebalance_ms")
    elif e.rebalance_start_ms is not None and e.assigned_ms is not None:
        e.not_consuming_ms = max(e.assigned_ms - e.rebalance_start_ms, 0)


def _window(events: Sequence[ServerEvent], names: str | tuple[str, ...], generation: int | None,
            lower_ms: int | None, upper_ms: int | None, **match: Any) -> list[ServerEvent]:
    names = (names,) if isinstance(names, str) else names
    return [e for e in events if e.event in names and e.generation == generation
            and (lower_ms is None or e.time_ms >= lower_ms) and (upper_ms is None or e.time_ms <= upper_ms)
            and all(e.get(k) == v for k, v in match.items())]


def _latest(events: Sequence[ServerEvent], names: str | tuple[str, ...], generation: int | None,
            lower_ms: int | None, upper_ms: int | None, **match: Any) -> ServerEvent | None:
    found = _window(events, names, generation, lower_ms, upper_ms, **match)
    return found[-1] if found else None  # events are in time order


def _earliest(events: Sequence[ServerEvent], name: str, generation: int, lower_ms: int) -> ServerEvent | None:
    found = _window(events, name, generation, lower_ms, None)
    return found[0] if found else None


# -------------------------------------------------------------------------------------------- text


def _time(ms: int | None) -> str:
    if ms is None:
        return "?"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _who(client_id: str | None, member_id: str | None) -> str:
    if member_id is None:
        return "-"
    return f"{client_id} ({member_id})" if client_id and not member_id.startswith(f"{client_id}-") else member_id


def _ms(value: int | None) -> str:
    return "?" if value is None else f"{value}"


def waited_for(e: Explanation) -> str:
    """Who the join phase waited for: the members that never rejoined (the rebalance timeout ended it),
    else the last one to arrive."""
    if e.not_rejoined:
        return ", ".join(_who(c.client_id, c.member_id) for c in e.not_rejoined) + " (never rejoined)"
    if e.last_joined_member_id is None:
        return "?" if e.rebalanced and e.cause_source != "server log" else "-"
    return f"{_who(e.last_joined_client_id, e.last_joined_member_id)} at +{_ms(e.last_joined_after_ms)} ms"


def membership(e: Explanation) -> str:
    parts = [str(e.member_count)]
    parts += [f"+{_who(c.client_id, c.member_id)}" for c in e.joined]
    parts += [f"-{_who(c.client_id, c.member_id)}" + (f" [{c.cause}]" if c.cause else "") for c in e.left]
    parts += [f"~{c.group_instance_id}: {c.old_member_id} -> {c.member_id}" for c in e.replaced]
    parts += [f"*{_who(c.client_id, c.member_id)} subscription" for c in e.subscription_changed]
    return " ".join(parts)


def trigger_text(e: Explanation) -> str:
    if e.trigger is None:
        return "unknown (no server log)"
    return e.trigger if e.rebalanced or e.generation == 0 else f"{e.trigger} (no rebalance)"


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


# "started": the rebalance's start (server log), else when its join completed (segments), else when the
# record was written (an in-place replacement).
COLUMNS = ("gen", "started (UTC)", "trigger", "caused by", "join ms", "waited for", "not consuming ms",
           "members (+joined -left ~replaced)")


def text_rows(explanations: Sequence[Explanation]) -> list[tuple[str, ...]]:
    return [(str(e.generation), _time(_first(e.rebalance_start_ms, e.join_completed_ms, e.assigned_ms)),
             trigger_text(e), _who(e.trigger_client_id, e.trigger_member_id), _ms(e.join_ms), waited_for(e),
             _ms(e.not_consuming_ms), membership(e)) for e in explanations]


def format_table(explanations: Sequence[Explanation]) -> str:
    """A plain text table per (node, group), one line per generation."""
    blocks = []
    by_timeline: dict[tuple[str, str], list[Explanation]] = {}
    for e in explanations:
        by_timeline.setdefault((e.node, e.group), []).append(e)
    for (node, group), rows in by_timeline.items():
        table = [COLUMNS, *text_rows(rows)]
        widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS) - 1)]
        lines = ["  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)), r[-1]]).rstrip()
                 for r in table]
        blocks.append(f"group {group} on {node}\n" + "\n".join(lines))
    return "\n\n".join(blocks) if blocks else "no GroupMetadata records for this group"
