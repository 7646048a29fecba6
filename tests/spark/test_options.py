"""The options the `tributary` source and sink accept, with no Spark session and no cluster: every
option they do not support is refused naming it and listing the supported ones, keys in any case
(Spark hands a Python data source its options lower-cased, in a case-insensitive dict)."""

from __future__ import annotations

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import BinaryType, StructField, StructType

from pipeline.options import (
    SOURCE_OPTIONS,
    SourceOptions,
    StrategyOnNoMatch,
    UnsupportedOptionError,
    check_supported,
)
from pipeline.sink import SinkOptions, UnsupportedSaveModeError, check_save_mode

pytestmark = pytest.mark.spark
REQUIRED = {"bootstrap": "127.0.0.1:9092", "topic": "orders"}
VALUES = StructType([StructField("value", BinaryType())])


def source(streaming: bool = False, **options: str) -> SourceOptions:
    return SourceOptions.parse(CaseInsensitiveDict({**REQUIRED, **options}), streaming)


def test_every_supported_source_option_is_accepted_in_the_case_spark_hands_it() -> None:
    assert check_supported({name.lower(): "x" for name in SOURCE_OPTIONS}, SOURCE_OPTIONS, "the source") is None
    parsed = source(**{"startingoffsets": "latest", "STARTINGOFFSETSBYTIMESTAMPSTRATEGY": "LATEST"})
    assert parsed.starting.default == -1
    assert parsed.no_match is StrategyOnNoMatch.LATEST


@pytest.mark.parametrize("option", ["endingtimestamp", "startingoffsetsbytimestamp", "assign", "kafka.group.id",
                                    "startingOffset", "path"])
def test_an_option_the_source_does_not_support_is_refused_listing_the_supported_ones(option: str) -> None:
    with pytest.raises(UnsupportedOptionError) as raised:
        source(**{option: "1"})
    message = str(raised.value)
    assert f"the tributary source does not support the option(s) '{option.lower()}'" in message
    assert f"the supported options are {', '.join(SOURCE_OPTIONS)}" in message


def test_starting_timestamp_with_no_match_fails_unless_the_strategy_says_latest() -> None:
    """Spark's default for startingOffsetsByTimestampStrategy is error."""
    assert source(startingTimestamp="5").no_match is StrategyOnNoMatch.ERROR
    with pytest.raises(ValueError, match=r"startingOffsetsByTimestampStrategy='earliest': use error .* or latest"):
        source(startingOffsetsByTimestampStrategy="earliest")


def test_include_headers_is_accepted_as_true_only() -> None:
    source(includeHeaders="true")
    with pytest.raises(ValueError, match="the headers column is always read"):
        source(includeHeaders="false")


def test_the_sink_takes_the_checkpoint_location_of_a_stream_only_and_refuses_kafka_settings() -> None:
    stream = SinkOptions.parse(CaseInsensitiveDict({**REQUIRED, "checkpointlocation": "/tmp/c"}), VALUES, True)
    assert (stream.bootstrap, stream.topic) == ("127.0.0.1:9092", "orders")
    with pytest.raises(UnsupportedOptionError) as raised:
        SinkOptions.parse(CaseInsensitiveDict({**REQUIRED, "checkpointlocation": "/tmp/c"}), VALUES, False)
    assert str(raised.value) == ("the tributary sink does not support the option(s) 'checkpointlocation'; the "
                                 "supported options are bootstrap, kafka.bootstrap.servers, topic")
    with pytest.raises(UnsupportedOptionError, match=r"'kafka\.acks'"):
        SinkOptions.parse(CaseInsensitiveDict({**REQUIRED, "kafka.acks": "1"}), VALUES, True)


def test_a_batch_write_may_append_but_not_overwrite() -> None:
    check_save_mode(overwrite=False)
    with pytest.raises(UnsupportedSaveModeError, match=r'save mode Overwrite is not allowed.*use mode\("append"\)'):
        check_save_mode(overwrite=True)
