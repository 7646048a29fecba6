"""Tributary for Spark: the `tributary` data source (batch and streaming reads and writes).

    import pipeline
    pipeline.register(spark)
    df = spark.read.format("tributary").option("bootstrap", "127.0.0.1:9192").option("topic", "t").load()

Options and columns are Spark's Kafka source's (see `pipeline.options` and `pipeline.sink`); the
usage and the example pipeline are in pipeline/README.md.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter
from pyspark.sql.types import StructType

from pipeline.arrow_records import SPARK_SCHEMA
from pipeline.options import SourceOptions
from pipeline.sink import BatchWriter, SinkOptions, StreamWriter, check_save_mode
from pipeline.source import BatchReader, StreamReader


class TributaryDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tributary"

    def schema(self) -> str:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        check_save_mode(overwrite)
        return BatchWriter(SinkOptions.parse(self.options, schema, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(SinkOptions.parse(self.options, schema, streaming=True))


def register(spark: SparkSession) -> None:
    """Make `format("tributary")` known to this session."""
    spark.dataSource.register(TributaryDataSource)
