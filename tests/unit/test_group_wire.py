"""protocol/group_wire.py encodes JoinGroup and SyncGroup answers byte for byte as kafka-python's classes do
(through protocol/group_messages.py, the generic builders), on generated results at every version."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_server.group.api import JoinGroupMember, JoinGroupResult, SyncGroupResult
from protocol import group_messages as gm
from protocol import group_wire
from protocol.apis import API_TABLE
from protocol.errors import Errors
from protocol.framing import encode_response

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)
opt_text = st.one_of(st.none(), text)
blobs = st.binary(max_size=300)
errors = st.sampled_from(list(Errors))
int32 = st.integers(-(2**31), 2**31 - 1)

join_results = st.builds(
    JoinGroupResult, error=errors, generation_id=int32, protocol_type=opt_text, protocol_name=opt_text,
    leader=text, member_id=text,
    members=st.lists(st.builds(JoinGroupMember, member_id=text, group_instance_id=opt_text, metadata=blobs),
                     max_size=5),
    skip_assignment=st.booleans())
sync_results = st.builds(SyncGroupResult, error=errors, protocol_type=opt_text, protocol_name=opt_text,
                         assignment=blobs)


def test_versions_cover_what_we_serve() -> None:
    assert API_TABLE[11].max_version <= 9 and API_TABLE[14].max_version <= 5


@settings(max_examples=400)
@given(join_results, st.integers(0, API_TABLE[11].max_version), int32)
def test_join_group_response_is_kafka_pythons(result: JoinGroupResult, version: int, correlation_id: int) -> None:
    expected = encode_response(gm.join_group_response(result, version), correlation_id)
    assert encode_response(group_wire.join_group_response(result, version), correlation_id) == expected


@settings(max_examples=300)
@given(sync_results, st.integers(0, API_TABLE[14].max_version), int32)
def test_sync_group_response_is_kafka_pythons(result: SyncGroupResult, version: int, correlation_id: int) -> None:
    expected = encode_response(gm.sync_group_response(result, version), correlation_id)
    assert encode_response(group_wire.sync_group_response(result, version), correlation_id) == expected


def test_error_codes_are_carried_for_the_metrics() -> None:
    assert group_wire.sync_group_response(SyncGroupResult(Errors.REBALANCE_IN_PROGRESS), 3).error_codes == (27,)
