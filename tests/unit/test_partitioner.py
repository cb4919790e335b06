from hypothesis import given
from hypothesis import strategies as st

from coordinator_server.group.partitioner import java_string_hash, kafka_abs, partition_for


def test_java_string_hash_matches_java_for_ascii_and_surrogates() -> None:
    # Values printed by Java 17's String.hashCode().
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("my-group") == -1906497762
    assert java_string_hash("polygenelubricants") == -2147483648
    # A character outside the BMP counts as two UTF-16 code units, as in Java.
    assert java_string_hash("\U0001F600") == 1772899


def test_kafka_abs_maps_int_min_to_zero() -> None:
    assert kafka_abs(-(2**31)) == 0
    assert kafka_abs(-5) == 5


def test_partition_for_uses_kafka_abs_of_hash_modulo_partitions() -> None:
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("my-group", 50) == 1906497762 % 50


@given(st.text())
def test_java_string_hash_is_the_hash_of_the_utf16_code_units(text: str) -> None:
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    assert java_string_hash(text) == (h - (1 << 32) if h & 0x80000000 else h)
