package io.sparkpurgatory.checks;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF13;

import scala.collection.Seq;

/**
 * A typed operation's checks in one function: what spark_purgatory/spark/sources.py (with
 * typed_columns.py and sql_text.py) writes as SQL for typed input (its cleaning of keys and
 * members, its reading of the condition, the reasons in the contract's order), for Catalyst
 * one expression node instead of some hundreds that it optimizes again in every micro-batch.
 *
 * <p>Arguments (SQL, in order): op_id, keys, key, ts_ms (null when unreadable), ts is null,
 * the latest event time accepted (null: no ts_in_future check), timeout_ms (null when not a
 * whole number), timeout_ms is null, the largest timeout, condition, target, members, and
 * the condition names ("any count sum all offset|count sum offset|all|1000|1000": every name,
 * those that need a target, the one that needs members; then the most distinct keys and
 * members an operation may have, input.max.keys and input.max.members, none when absent).  Returns struct(reason, keys, condition,
 * members): the first failing check's reason (null when valid), the keys and members with
 * blank items dropped and deduplicated, the keys in their order (a repeated key at its first
 * place, as the outcome shows them), the members sorted (by code point, as Spark sorts
 * strings), the condition trimmed and in lower case (absent: any).
 *
 * <p>Strings are trimmed of spaces (U+0020) only, as Spark's trim; a condition name is lowered
 * for the ASCII capitals and the Kelvin sign only, as sql_text.condition_name does.
 */
public final class OperationChecks
    implements UDF13<String, Seq<String>, String, Long, Boolean, Long, Long, Boolean, Long, String, Double, Seq<String>, String, Row> {

  private static final long serialVersionUID = 1L;

  /** The condition names, read once from their text (immutable: tasks may share a function). */
  private static final class Names {
    final String spec;
    final Set<String> all;
    final Set<String> needTarget;
    final String needsMembers;
    final long maxKeys;
    final long maxMembers;

    Names(String spec) {
      String[] parts = spec.split("\\|", -1);
      this.spec = spec;
      this.all = new HashSet<>(Arrays.asList(parts[0].split(" ")));
      this.needTarget = new HashSet<>(Arrays.asList(parts[1].split(" ")));
      this.needsMembers = parts[2];
      this.maxKeys = parts.length > 3 ? Long.parseLong(parts[3]) : Long.MAX_VALUE;
      this.maxMembers = parts.length > 4 ? Long.parseLong(parts[4]) : Long.MAX_VALUE;
    }
  }

  private transient volatile Names names;

  private Names names(String spec) {
    Names known = names;
    if (known == null || !known.spec.equals(spec)) {
      known = new Names(spec);
      names = known;
    }
    return known;
  }

  /**
   * The event time's reason, shared by operations and events (sources._ts_checks in SQL):
   * missing, unreadable or out of range, or later than the latest accepted; null when none.
   */
  static String timeReason(Boolean noTs, Long tsMs, Long latestTs) {
    if (Boolean.TRUE.equals(noTs)) {
      return "missing_ts";
    }
    if (tsMs == null) {
      return "bad_ts";
    }
    if (latestTs != null && tsMs > latestTs) {
      return "ts_in_future";
    }
    return null;
  }

  static String trim(String s) {
    int start = 0;
    int end = s.length();
    while (start < end && s.charAt(start) == ' ') {
      start++;
    }
    while (end > start && s.charAt(end - 1) == ' ') {
      end--;
    }
    return s.substring(start, end);
  }

  static boolean blank(String s) {
    return s == null || trim(s).isEmpty();
  }

  /**
   * Blank items dropped, deduplicated (the first of each kept in place), sorted by code point
   * when {@code sorted}; null stays null.
   */
  static List<String> clean(Seq<String> items, boolean sorted) {
    if (items == null) {
      return null;
    }
    int n = items.length();
    List<String> out = new ArrayList<>(n);
    if (n == 1) {
      String only = items.apply(0);
      if (!blank(only)) {
        out.add(only);
      }
      return out;
    }
    Set<String> seen = new HashSet<>(n * 2);
    for (int i = 0; i < n; i++) {
      String item = items.apply(i);
      if (!blank(item) && seen.add(item)) {
        out.add(item);
      }
    }
    if (sorted) {
      out.sort(OperationChecks::byCodePoint);
    }
    return out;
  }

  static int byCodePoint(String a, String b) {
    int i = 0;
    int j = 0;
    while (i < a.length() && j < b.length()) {
      int ca = a.codePointAt(i);
      int cb = b.codePointAt(j);
      if (ca != cb) {
        return Integer.compare(ca, cb);
      }
      i += Character.charCount(ca);
      j += Character.charCount(cb);
    }
    return Integer.compare(a.length() - i, b.length() - j);
  }

  static String condition(String given, Set<String> names) {
    String name = trim(given == null ? "any" : given);
    if (names.contains(name)) {
      return name;
    }
    StringBuilder lowered = new StringBuilder(name.length());
    for (int i = 0; i < name.length(); i++) {
      char c = name.charAt(i);
      if (c >= 'A' && c <= 'Z') {
        c = (char) (c + ('a' - 'A'));
      } else if (c == '\u212A') {
        c = 'k';
      }
      lowered.append(c);
    }
    return lowered.toString();
  }

  @Override
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
      String conditionNames) {
    Names names = names(conditionNames);
    List<String> keys;
    if (keysColumn != null) {
      keys = clean(keysColumn, false);
    } else if (!blank(key)) {
      keys = new ArrayList<>(1);
      keys.add(key);
    } else {
      keys = null;
    }
    String cond = condition(conditionGiven, names.all);
    List<String> members = clean(membersColumn, true);
    boolean needsTarget = names.needTarget.contains(cond);
    String time = timeReason(noTs, tsMs, latestTs);
    String reason = null;
    if (blank(opId)) {
      reason = "missing_op_id";
    } else if (keys == null || keys.isEmpty()) {
      reason = "missing_key";
    } else if (keys.size() > names.maxKeys) {
      reason = "too_many_keys";
    } else if (time != null) {
      reason = time;
    } else if (Boolean.TRUE.equals(noTimeout)) {
      reason = "missing_timeout_ms";
    } else if (timeoutMs == null) {
      reason = "bad_timeout_ms";
    } else if (timeoutMs < 0) {
      reason = "negative_timeout";
    } else if (timeoutMs > maxTimeoutMs) {
      reason = "timeout_above_max";
    } else if (!names.all.contains(cond)) {
      reason = "unknown_condition";
    } else if (needsTarget && target == null) {
      reason = "missing_target";
    } else if (needsTarget && !Double.isFinite(target)) {
      reason = "bad_target";
    } else if (cond.equals(names.needsMembers) && (members == null || members.isEmpty())) {
      reason = "missing_members";
    } else if (members != null && members.size() > names.maxMembers) {
      reason = "too_many_members";
    }
    return RowFactory.create(reason, keys, cond, members);
  }
}
