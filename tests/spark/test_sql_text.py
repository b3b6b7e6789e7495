"""``sql_text.literal_column``: typed literals the optimizer leaves as they are, their JVM
classes looked up once per Py4J gateway client."""

from __future__ import annotations

from pyspark.sql import types as T

from spark_purgatory.spark import sql_text


def test_literals_are_typed_values_and_their_classes_are_looked_up_once_per_client(spark):
    frame = spark.range(1).select(
        sql_text.literal_column(spark, None, "bigint").alias("none"),
        sql_text.literal_column(spark, [2, 0, 1], "array<int>").alias("labels"),
    )
    assert frame.schema["none"].dataType == T.LongType()
    # a list's elements are never null, and its type says so (the state key's nullability)
    assert frame.schema["labels"].dataType == T.ArrayType(T.IntegerType(), containsNull=False)
    assert frame.collect()[0].asDict() == {"none": None, "labels": [2, 0, 1]}

    client = spark._jvm._gateway_client
    held = sql_text._LITERAL_CLASSES[id(client)]
    assert held[0] is client
    sql_text.literal_column(spark, None, "string")
    assert sql_text._LITERAL_CLASSES[id(client)] is held  # no second lookup for this client


def test_another_client_looks_the_classes_up_again():
    """A client whose id was seen before, but which is not the one held (a new session's
    JVM), gets its own classes."""

    class Client:
        pass

    class Jvm:
        def __init__(self, client: Client) -> None:
            self._gateway_client = client
            self.org = self  # org.apache.spark.sql... resolves to this object's attributes
            self.apache = self.spark = self.sql = self.catalyst = self.expressions = self
            self.types = self.classic = self
            self.Literal = ("Literal", client)
            self.DataType = ("DataType", client)
            self.ExpressionUtils = ("ExpressionUtils", client)

    first, second = Client(), Client()
    assert sql_text._literal_classes(Jvm(first))[0] == ("Literal", first)
    sql_text._LITERAL_CLASSES[id(second)] = sql_text._LITERAL_CLASSES.pop(id(first))  # a reused id
    assert sql_text._literal_classes(Jvm(second))[0] == ("Literal", second)
    assert sql_text._LITERAL_CLASSES[id(second)][0] is second
    del sql_text._LITERAL_CLASSES[id(second)]
