package io.sparkpurgatory.checks;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF17;

import scala.collection.Seq;

/**
 * A typed operation checked and routed in one call: {@link OperationChecks} then {@link
 * OperationRoutes}, for Catalyst one expression node and one conversion of the row's fields,
 * where the two functions took two projections and converted the cleaned keys twice.
 *
 * <p>Arguments (SQL, in order): those of {@link OperationChecks}, then those of {@link
 * OperationRoutes} after its raw text (the shard count, the shard key delimiter, whether
 * operations whose keys span shards are allowed, whether the op_id registry is on).  Returns
 * struct(reason, condition, members, copies): the checks' reason (or the routes'
 * cross_shard_keys), condition and members, and the routes' copies, with -1 for the shard of
 * a rejected row: its raw text is rendered after the call, only for rejected rows, and the
 * caller hashes it (spark_purgatory/spark/routing.py).
 */
public final class OperationRows
    implements UDF17<
        String, Seq<String>, String, Long, Boolean, Long, Long, Boolean, Long, String, Double,
        Seq<String>, String, Integer, String, Boolean, Boolean, Row> {

  private static final long serialVersionUID = 1L;
  private static final OperationRoutes.BadShard UNKNOWN = shards -> -1;

  private final OperationChecks checks = new OperationChecks();

  @Override
  @SuppressWarnings("unchecked")
  public Row call(
      String opId,
      Seq<String> keysColumn,
      String key,
      Long tsMs,
      Boolean noTs,
      Long latestTs,
      Long timeoutMs,
      Boolean noTimeout,
      Long maxTimeoutMs,
      String conditionGiven,
      Double target,
      Seq<String> membersColumn,
      String conditionNames,
      Integer shardCount,
      String delimiter,
      Boolean crossShardAllowed,
      Boolean registering) {
    Row checked =
        checks.call(
            opId, keysColumn, key, tsMs, noTs, latestTs, timeoutMs, noTimeout, maxTimeoutMs,
            conditionGiven, target, membersColumn, conditionNames);
    List<String> keys = (List<String>) checked.get(1);
    Row routed =
        OperationRoutes.routes(
            keys == null ? new ArrayList<>() : keys, opId, checked.getString(0), UNKNOWN,
            shardCount, delimiter, Boolean.TRUE.equals(crossShardAllowed),
            Boolean.TRUE.equals(registering));
    return RowFactory.create(routed.getString(0), checked.get(2), checked.get(3), routed.get(1));
  }
}
