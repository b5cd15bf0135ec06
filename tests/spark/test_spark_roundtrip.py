"""Batch round trips through the `commitlog` data source: every Spark SQL type the Arrow bridge
carries, nulls and nesting, large rows, empty DataFrames, offsets, partitions, schema rules."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from pyspark.sql import Row
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, DateType,
                               DayTimeIntervalType, DecimalType, DoubleType, FloatType,
                               IntegerType, LongType, MapType, NullType, ShortType, StringType,
                               StructField, StructType, TimestampNTZType, TimestampType)

from commitlog import CommitLog
from commitlog.spark import SchemaMismatchError, jobs, stored_schema

from spark_helpers import ids, load, spark_records, stage

pytestmark = pytest.mark.spark

INNER = StructType([StructField("name", StringType()), StructField("score", DoubleType()),
                    StructField("tags", ArrayType(StringType()))])
ALL_TYPES = StructType([
    StructField("id", LongType(), False),
    StructField("b", BooleanType()),
    StructField("i8", ByteType()),
    StructField("i16", ShortType()),
    StructField("i32", IntegerType()),
    StructField("f32", FloatType()),
    StructField("f64", DoubleType()),
    StructField("dec", DecimalType(38, 10)),
    StructField("dec_small", DecimalType(5, 2)),
    StructField("s", StringType()),
    StructField("bin", BinaryType()),
    StructField("d", DateType()),
    StructField("ts", TimestampType()),
    StructField("ts_ntz", TimestampNTZType()),
    StructField("span", DayTimeIntervalType()),
    StructField("nothing", NullType()),
    StructField("ints", ArrayType(IntegerType())),
    StructField("ints_not_null", ArrayType(IntegerType(), containsNull=False)),
    StructField("nested_arrays", ArrayType(ArrayType(LongType()))),
    StructField("structs", ArrayType(INNER)),
    StructField("m", MapType(StringType(), IntegerType())),
    StructField("m_nested", MapType(IntegerType(), ArrayType(StringType()))),
    StructField("st", StructType([StructField("inner", INNER), StructField("when", TimestampType()),
                                  StructField("amount", DecimalType(12, 3))])),
])


def _row(i: int) -> tuple:
    if i % 5 == 4:   # every nullable column null
        return (i,) + (None,) * (len(ALL_TYPES.fields) - 1)
    utc = dt.timezone.utc
    return (
        i, i % 2 == 0, (i % 256) - 128, i * 7 - 1000, i * 1000003 - 2**30, i / 3.0, i * 1e-3,
        decimal.Decimal(f"{i}.0123456789"), decimal.Decimal(f"{i % 999}.5"), f"row {i} ✓",
        bytes([i % 256]) * (i % 7), dt.date(2020, 1, 1) + dt.timedelta(days=i),
        dt.datetime(2021, 3, 4, 5, 6, 7, 123456, tzinfo=utc) + dt.timedelta(seconds=i),
        dt.datetime(1999, 12, 31, 23, 59, 59, 999999) - dt.timedelta(minutes=i),
        dt.timedelta(days=i, microseconds=7), None,
        [i, None, -i], [i, i + 1], [[i], [], None],
        [Row(name=f"n{i}", score=i / 7, tags=["a", None]), None],
        {"k": i, "none": None}, {i: ["x", None], -i: []},
        Row(inner=Row(name=None, score=0.5, tags=[]),
            when=dt.datetime(2000, 1, 1, tzinfo=utc), amount=decimal.Decimal("123456789.125")),
    )


@pytest.mark.usefixtures("both_readers")
def test_every_arrow_type_round_trips_with_nulls_and_nesting(spark, log_path):
    df = spark.createDataFrame([_row(i) for i in range(60)], ALL_TYPES).repartition(3)
    stage(df, log_path)
    back = load(spark, log_path)
    assert back.schema == ALL_TYPES
    assert sorted(back.collect()) == sorted(df.collect())
    # A second append of the same schema lands behind the first.
    stage(df.limit(10), log_path)
    assert load(spark, log_path).count() == 70


@pytest.mark.usefixtures("both_readers")
def test_variant_and_geometry_round_trip(spark, log_path):
    df = spark.sql("""SELECT id, parse_json(concat('{"a": ', id, ', "b": [1, null]}')) AS v,
                      st_geomfromwkb(X'0101000000000000000000F03F0000000000000040') AS g
                      FROM range(5)""")
    stage(df, log_path)
    back = load(spark, log_path)
    assert back.schema == df.schema
    as_text = "id, to_json(v) AS v, hex(st_asbinary(g)) AS g"
    assert sorted(back.selectExpr(*as_text.split(", ")).collect()) == \
        sorted(df.selectExpr(*as_text.split(", ")).collect())


@pytest.mark.usefixtures("both_readers")
def test_large_rows_and_batches_split_to_fit_segments(spark, log_path):
    # 1 MiB segments: a 10-row Arrow batch of 300 KiB rows does not fit one record, so it is
    # split; a single 700 KiB row still fits.
    df = spark.sql("SELECT id, repeat(cast(id AS string), 300 * 1024) AS payload FROM range(10)") \
        .union(spark.sql("SELECT 10 AS id, repeat('x', 700 * 1024) AS payload"))
    stage(df.coalesce(1), log_path, segmentSize="1MiB")
    back = load(spark, log_path)
    got = {r.id: r.payload for r in back.collect()}
    assert sorted(got) == list(range(11))
    assert got[3] == "3" * 300 * 1024 and got[10] == "x" * 700 * 1024
    with CommitLog.open(log_path, readonly=True) as log:
        assert log.segment_size == 1 << 20
        assert len(log.segments()) >= 3


def test_row_larger_than_a_segment_fails_clearly(spark, log_path):
    df = spark.sql("SELECT 1 AS id, repeat('x', 2 * 1024 * 1024) AS payload")
    with pytest.raises(Exception, match="more than a record can hold"):
        stage(df, log_path, segmentSize="1MiB")
    assert load(spark, log_path).count() == 0


@pytest.mark.usefixtures("both_readers")
def test_empty_dataframes(spark, log_path):
    schema = StructType([StructField("id", LongType()), StructField("s", StringType())])
    stage(spark.createDataFrame([], schema), log_path)
    back = load(spark, log_path)
    assert back.schema == schema and back.count() == 0
    stage(spark.createDataFrame([(1, "a")], schema), log_path)
    stage(spark.createDataFrame([], schema).repartition(4), log_path)   # empty partitions
    assert load(spark, log_path).collect() == [Row(id=1, s="a")]
    assert [j.state for j in jobs(log_path)] == ["committed"] * 3


@pytest.mark.usefixtures("both_readers")
def test_reading_a_missing_log_or_one_without_schema_fails_clearly(spark, tmp_path):
    with pytest.raises(Exception, match="write a DataFrame to it first"):
        load(spark, str(tmp_path / "nowhere")).collect()
    with CommitLog.open(str(tmp_path / "plain"), segment_size=1 << 16) as log:
        log.append(b"not staged through spark")
    with pytest.raises(Exception, match="no staged schema"):
        load(spark, str(tmp_path / "plain")).collect()


@pytest.mark.usefixtures("both_readers")
def test_records_appended_by_others_are_not_rows(spark, log_path):
    stage(spark.range(5), log_path)
    with CommitLog.open(log_path) as log:
        log.append(b"an application's own record")
    stage(spark.range(5, 8), log_path)
    assert ids(load(spark, log_path)) == list(range(8))


@pytest.mark.usefixtures("both_readers")
def test_log_order_within_a_partition_and_offset_options(spark, log_path):
    for start in range(0, 40, 10):   # four jobs of one record each
        stage(spark.range(start, start + 10, numPartitions=1), log_path)
    back = load(spark, log_path)
    assert back.rdd.getNumPartitions() == 1 and [r.id for r in back.collect()] == list(range(40))
    offsets = [o for o, _ in spark_records(log_path)]
    assert len(offsets) == 4
    window = load(spark, log_path, startOffset=offsets[1], endOffset=offsets[3])
    assert [r.id for r in window.collect()] == list(range(10, 30))
    assert load(spark, log_path, startOffset=offsets[3] + 1).count() == 0


@pytest.mark.usefixtures("both_readers")
def test_one_partition_per_offset_range(spark, log_path):
    stage(spark.range(0, 200_000, numPartitions=4), log_path, segmentSize="256KiB")
    with CommitLog.open(log_path, readonly=True) as log:
        segments = log.segments()
    used = sum(s.used_bytes for s in segments)
    assert len(segments) > 4
    back = load(spark, log_path, maxPartitionBytes="300KiB")
    assert back.rdd.getNumPartitions() == pytest.approx(used / (300 << 10), abs=1)
    assert ids(back) == list(range(200_000))
    assert load(spark, log_path).rdd.getNumPartitions() == 1   # small: one 4 MiB partition
    from commitlog.spark.reading.reader import plan_partitions
    from commitlog.spark.ledger.ledger_view import VisibleRecord
    parts = plan_partitions([VisibleRecord(o, 10, 100) for o in range(100) if o % 10], 1000)
    assert [p.rows for p in parts] == [100] * 9                # even shares of 1000 bytes
    assert parts[0].runs == ((1, 10), (11, 12))                 # runs of consecutive offsets


def test_incompatible_schema_fails_before_any_task_writes(spark, log_path):
    stage(spark.range(10), log_path)
    end_before = spark_records(log_path)
    wrong_type = spark.range(3).selectExpr("cast(id AS string) AS id")
    with pytest.raises(Exception, match=r"column 'id' is bigint in the log but string"):
        stage(wrong_type, log_path)
    extra = spark.range(3).selectExpr("id", "id AS other")
    with pytest.raises(Exception, match=r"cannot append to commit log .*2 \['id', 'other'\]"):
        stage(extra, log_path)
    assert spark_records(log_path) == end_before       # nothing was appended
    assert ids(load(spark, log_path)) == list(range(10))
    with pytest.raises(Exception) as failure:     # raised by the source's own error type
        stage(wrong_type, log_path)
    assert SchemaMismatchError.__name__ in str(failure.value)


@pytest.mark.usefixtures("both_readers")
def test_nullability_widens_and_old_records_still_read(spark, log_path):
    stage(spark.range(3), log_path)                         # id bigint NOT NULL
    assert stored_schema(log_path)["id"].nullable is False
    stage(spark.createDataFrame([(None,), (7,)], "id bigint"), log_path)
    assert stored_schema(log_path)["id"].nullable is True
    back = load(spark, log_path)
    assert back.schema["id"].nullable is True
    assert sorted(back.collect(), key=lambda r: (r.id is not None, r.id)) == \
        [Row(id=None), Row(id=0), Row(id=1), Row(id=2), Row(id=7)]


def test_overwrite_is_refused(spark, log_path):
    stage(spark.range(3), log_path)
    with pytest.raises(Exception, match=r"append-only: mode\(\"overwrite\"\) is not supported"):
        spark.range(3).write.format("commitlog").option("path", log_path).mode("overwrite").save()
    assert ids(load(spark, log_path)) == [0, 1, 2]


def test_a_user_schema_must_match_the_log(spark, log_path):
    stage(spark.range(3), log_path)
    assert spark.read.format("commitlog").schema("id bigint").option("path", log_path) \
        .load().count() == 3
    with pytest.raises(Exception, match="cannot read commit log"):
        spark.read.format("commitlog").schema("id int").option("path", log_path).load().collect()


def test_bad_options_are_rejected_on_the_driver(spark, log_path):
    with pytest.raises(Exception, match='option "path" is required'):
        spark.read.format("commitlog").load().collect()
    with pytest.raises(Exception, match='option "segmentSize" must be a positive size'):
        stage(spark.range(1), log_path, segmentSize="big")
    with pytest.raises(Exception, match='option "endOffset" .* is below "startOffset"'):
        load(spark, log_path, startOffset=5, endOffset=2).collect()


def test_importing_commitlog_does_not_import_pyspark():
    import subprocess
    import sys
    code = ("import sys, commitlog, commitlog.log, commitlog.state; "
            "assert 'pyspark' not in sys.modules and 'pyarrow' not in sys.modules, sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_reads_are_zero_copy_and_batches_outlive_the_scan(spark, log_path):
    import pyarrow as pa

    from commitlog.spark.source_options import Options
    from commitlog.spark.reading.reader import CommitLogBatchReader
    from commitlog.spark.schema import arrow_schema, decode

    stage(spark.range(0, 50_000, numPartitions=2).selectExpr("id", "cast(id AS string) AS s"),
          log_path, segmentSize="256KiB")
    with CommitLog.open(log_path, readonly=True) as log:
        for rec in log.scan(zero_copy=True):
            view = pa.py_buffer(rec.value)
            batch = decode(rec.value)
            for column in batch.columns:
                for buf in column.buffers():
                    if buf is not None and buf.size:   # every buffer lies inside the mapping
                        assert view.address <= buf.address < view.address + view.size
            assert view.address % 8 == 0               # and is aligned for Arrow
    schema = arrow_schema(stored_schema(log_path))
    reader = CommitLogBatchReader(Options.parse({"path": log_path}), schema)
    batches = [b for p in reader.partitions() for b in reader.read(p)]   # every scan closed
    assert len(batches) > 2
    got = sorted(v for b in batches for v in b.column("id").to_pylist())
    assert got == list(range(50_000))
    assert all(b.column("s").to_pylist() == [str(i) for i in b.column("id").to_pylist()]
               for b in batches)
