package io.sparkpurgatory.checks;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF13;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A typed operation's checks in one function: what spark_purgatory/spark/sources.py (with
 * typed_columns.py and sql_text.py) writes as SQL for typed input (its cleaning of keys and
 * members, its reading of the condition, the reasons in the contract's order), for Catalyst
 * one expression node instead of some hundreds that it optimizes again in every micro-batch.
 *
 * <p>Arguments (SQL, in order): op_id, keys, key, ts_ms (null when unreadable), ts is null,
 * the latest event time accepted (null: no ts_in_future check), timeout_ms (null when not a
 * whole number), timeout_ms is null, the largest timeout, condition, target, members, and
 * the condition names ("any count sum all offset quorum|count sum offset quorum|all
 * quorum|1000|1000|quorum": every name, those that need and use a target, those that need and
 * use members; then the most distinct keys and members an operation may have, input.max.keys
 * and input.max.members, none when absent; then those whose target may not exceed their
 * distinct members).  A target or members given to a condition that does not use them is
 * rejected (unused_target, unused_members), never ignored.  Returns struct(reason, keys, condition,
 * members): the first failing check's reason (null when valid), the keys and members with
 * blank items dropped and deduplicated, the keys in their order (a repeated key at its first
 * place, as the outcome shows them), the members sorted (by code point, as Spark sorts
 * strings), the condition trimmed and in lower case (absent: any).
 *
 * <p>Strings are trimmed of spaces (U+0020) only, as Spark's trim; a condition name is lowered
 * for the ASCII capitals and the Kelvin sign only, as sql_text.condition_name does.
 *
 * <p>The checks work on Spark's own strings ({@code UTF8String}: {@link #check}), as {@link
 * OperationRows} gets them from Spark; this Java UDF converts its arguments to them and back.
 */
public final class OperationChecks
    implements UDF13<String, Seq<String>, String, Long, Boolean, Long, Long, Boolean, Long, String, Double, Seq<String>, String, Row> {

  private static final long serialVersionUID = 1L;
  private static final UTF8String ANY = UTF8String.fromString("any");

  /** The condition names, read once from their text (immutable: tasks may share them). */
  static final class Names {
    final UTF8String spec;
    final List<UTF8String> all;
    final List<UTF8String> needTarget;
    final List<UTF8String> needMembers;
    final long maxKeys;
    final long maxMembers;
    final List<UTF8String> countMembers;

    Names(UTF8String spec) {
      String[] parts = spec.toString().split("\\|", -1);
      this.spec = spec.clone(); // a row's text may be a view of memory Spark reuses
      this.all = utf8List(parts[0]);
      this.needTarget = utf8List(parts[1]);
      this.needMembers = utf8List(parts[2]);
      this.maxKeys = parts.length > 3 ? Long.parseLong(parts[3]) : Long.MAX_VALUE;
      this.maxMembers = parts.length > 4 ? Long.parseLong(parts[4]) : Long.MAX_VALUE;
      this.countMembers = parts.length > 5 ? utf8List(parts[5]) : new ArrayList<>();
    }

    /** A few names: looked up by comparing bytes, cheaper than hashing them in every row. */
    private static List<UTF8String> utf8List(String spaced) {
      List<UTF8String> out = new ArrayList<>();
      for (String name : spaced.split(" ")) {
        out.add(UTF8String.fromString(name));
      }
      return out;
    }
  }

  /** The names last read (one text per query: read again only when it changes). */
  private static volatile Names names;

  /** The names that {@code spec} gives (a literal: the same object in every row). */
  static Names names(UTF8String spec) {
    Names known = names;
    if (known == null || (known.spec != spec && !known.spec.equals(spec))) {
      known = new Names(spec);
      names = known;
    }
    return known;
  }

  /** A typed operation checked: its reason (null when valid), cleaned keys, condition, members. */
  static final class Checked {
    final String reason;
    final List<UTF8String> keys;
    final UTF8String condition;
    final List<UTF8String> members;

    Checked(String reason, List<UTF8String> keys, UTF8String condition, List<UTF8String> members) {
      this.reason = reason;
      this.keys = keys;
      this.condition = condition;
      this.members = members;
    }
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

  /**
   * An event time read from its column (epoch ms; {@code readNull}: none) where it is in the
   * contract's range, from 0 up to {@code end} ({@code endNull}: no end), else null (bad_ts):
   * sql_text.in_range, for the calls that read the column themselves ({@link OperationRows},
   * {@link EventRows}).
   */
  static Long inRange(boolean readNull, long read, boolean endNull, long end) {
    return !readNull && read >= 0 && (endNull || read < end) ? read : null;
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

  /** Null, empty or spaces (U+0020) alone. */
  static boolean blank(UTF8String s) {
    if (s == null) {
      return true;
    }
    for (int i = 0; i < s.numBytes(); i++) {
      if (s.getByte(i) != ' ') {
        return false;
      }
    }
    return true;
  }

  /**
   * Blank items dropped, deduplicated (the first of each kept in place), sorted by code point
   * (UTF-8's byte order) when {@code sorted}; null stays null.
   */
  static List<UTF8String> clean(List<UTF8String> items, boolean sorted) {
    if (items == null) {
      return null;
    }
    int n = items.size();
    List<UTF8String> out = new ArrayList<>(n);
    if (n == 1) {
      UTF8String only = items.get(0);
      if (!blank(only)) {
        out.add(only);
      }
      return out;
    }
    Set<UTF8String> seen = new HashSet<>(n * 2);
    for (int i = 0; i < n; i++) {
      UTF8String item = items.get(i);
      if (!blank(item) && seen.add(item)) {
        out.add(item);
      }
    }
    if (sorted) {
      out.sort(UTF8String::binaryCompare);
    }
    return out;
  }

  static UTF8String condition(UTF8String given, List<UTF8String> names) {
    UTF8String name = given == null ? ANY : given.trim();
    int known = names.indexOf(name);
    if (known >= 0) {
      return names.get(known);
    }
    String text = name.toString();
    StringBuilder lowered = new StringBuilder(text.length());
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c >= 'A' && c <= 'Z') {
        c = (char) (c + ('a' - 'A'));
      } else if (c == '\u212A') {
        c = 'k';
      }
      lowered.append(c);
    }
    return UTF8String.fromString(lowered.toString());
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
    Checked checked =
        check(utf8(opId), utf8(keysColumn), utf8(key), tsMs, noTs, latestTs, timeoutMs, noTimeout,
            maxTimeoutMs, utf8(conditionGiven), target, utf8(membersColumn),
            names(utf8(conditionNames)));
    return RowFactory.create(
        checked.reason, texts(checked.keys), text(checked.condition), texts(checked.members));
  }

  static UTF8String utf8(String text) {
    return text == null ? null : UTF8String.fromString(text);
  }

  private static List<UTF8String> utf8(Seq<String> items) {
    if (items == null) {
      return null;
    }
    List<UTF8String> out = new ArrayList<>(items.length());
    for (String item : CollectionConverters.asJava(items)) {
      out.add(utf8(item));
    }
    return out;
  }

  static String text(UTF8String value) {
    return value == null ? null : value.toString();
  }

  static List<String> texts(List<UTF8String> items) {
    if (items == null) {
      return null;
    }
    List<String> out = new ArrayList<>(items.size());
    for (UTF8String item : items) {
      out.add(text(item));
    }
    return out;
  }

  /** The checks of {@link #call} on Spark's strings (lists null where absent). */
  static Checked check(
      UTF8String opId,
      List<UTF8String> keysColumn,
      UTF8String key,
      Long tsMs,
      Boolean noTs,
      Long latestTs,
      Long timeoutMs,
      Boolean noTimeout,
      Long maxTimeoutMs,
      UTF8String conditionGiven,
      Double target,
      List<UTF8String> membersColumn,
      Names names) {
    List<UTF8String> keys;
    if (keysColumn != null) {
      keys = clean(keysColumn, false);
    } else if (!blank(key)) {
      keys = new ArrayList<>(1);
      keys.add(key);
    } else {
      keys = null;
    }
    UTF8String cond = condition(conditionGiven, names.all);
    List<UTF8String> members = clean(membersColumn, true);
    boolean knownCondition = names.all.contains(cond);
    boolean needsTarget = knownCondition && names.needTarget.contains(cond);
    boolean needsMembers = knownCondition && names.needMembers.contains(cond);
    int nMembers = members == null ? 0 : members.size();
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
    } else if (!knownCondition) {
      reason = "unknown_condition";
    } else if (needsTarget && target == null) {
      reason = "missing_target";
    } else if (needsTarget && !Double.isFinite(target)) {
      reason = "bad_target";
    } else if (needsMembers && nMembers == 0) {
      reason = "missing_members";
    } else if (nMembers > names.maxMembers) {
      reason = "too_many_members";
    } else if (names.countMembers.contains(cond) && target > nMembers) {
      reason = "target_above_members";
    } else if (!needsTarget && target != null) {
      reason = "unused_target";
    } else if (!needsMembers && nMembers > 0) {
      reason = "unused_members";
    }
    return new Checked(reason, keys, cond, members);
  }
}
