package io.sparkpurgatory.checks;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF15;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A typed operation's checks in one function: what spark_purgatory/spark/sources.py (with
 * typed_columns.py and sql_text.py) writes as SQL for typed input (its cleaning of keys and
 * members, its reading of the condition, the contract's checks in their order), for Catalyst
 * one expression node instead of some hundreds that it optimizes again in every micro-batch.
 *
 * <p>Arguments (SQL, in order): op_id, keys, key, ts_ms (null when unreadable), ts is null,
 * the latest event time accepted (null: no ts_in_future check), timeout_ms (null when not a
 * whole number), timeout_ms is null, the largest timeout (unused: the checks' table holds
 * it), condition, target, members, warn_ms (null when not a whole number), warn_ms is null,
 * and the checks: spark_purgatory.contract.rules.table_text,
 * the contract's declaration of the checks with their limits resolved, one check a line
 * ("reason test field bound when", tab-separated), read once per text ({@link Rules}) and
 * interpreted in its order: the first check that fails gives the reason.  Returns
 * struct(reason, keys, condition, members): that reason (null when valid), the keys and
 * members with blank items dropped and deduplicated, the keys in their order (a repeated key
 * at its first place, as the outcome shows them), the members sorted (by code point, as Spark
 * sorts strings), the condition trimmed and in lower case (absent: any).
 *
 * <p>Strings are trimmed of spaces (U+0020) only, as Spark's trim; a condition name is lowered
 * for the ASCII capitals and the Kelvin sign only, as sql_text.condition_name does.
 *
 * <p>The checks work on Spark's own strings ({@code UTF8String}: {@link #check}), as {@link
 * OperationRows} gets them from Spark; this Java UDF converts its arguments to them and back.
 */
public final class OperationChecks
    implements UDF15<String, Seq<String>, String, Long, Boolean, Long, Long, Boolean, Long, String, Double, Seq<String>, Long, Boolean, String, Row> {

  private static final long serialVersionUID = 1L;
  private static final UTF8String ANY = UTF8String.fromString("any");

  /** What a check tests: its test and field, as the table names them ("absent op_id"). */
  enum Kind {
    ABSENT_OP_ID, ABSENT_KEYS, MORE_KEYS, ABSENT_TS, UNREADABLE_TS, FUTURE_TS, ABSENT_TIMEOUT_MS,
    UNREADABLE_TIMEOUT_MS, BELOW_TIMEOUT_MS, ABOVE_TIMEOUT_MS, UNKNOWN_CONDITION, ABSENT_TARGET,
    NOT_FINITE_TARGET, ABOVE_TARGET, GIVEN_TARGET, ABSENT_MEMBERS, MORE_MEMBERS, GIVEN_MEMBERS,
    UNREADABLE_WARN_MS, BELOW_WARN_MS, ABOVE_WARN_MS;

    /** The kind of {@code test} on {@code field}, or null where these functions make none. */
    static Kind of(String test, String field) {
      String name = (test + "_" + field).toUpperCase(java.util.Locale.ROOT);
      for (Kind kind : values()) {
        if (kind.name().equals(name)) {
          return kind;
        }
      }
      return null;
    }
  }

  /** The fields an {@code above} check may take as its bound: a list's length, a number's value. */
  static final List<String> FIELD_BOUNDS = List.of("members", "timeout_ms");

  /** One check of the table: its reason, kind, bound and conditions (null: any). */
  static final class Rule {
    final String reason;
    final Kind kind;
    /** The bound as the table gives it: a number, another field, names, or "-" (none). */
    final String boundText;
    final long bound;
    /** Is the bound another field (above target: the members' count; above warn_ms: timeout_ms)? */
    final boolean boundIsField;
    final List<UTF8String> when;

    Rule(String line) {
      String[] parts = line.split("\t", -1);
      if (parts.length != 5) {
        throw new IllegalArgumentException("a check is five fields, tab-separated: " + line);
      }
      reason = parts[0];
      kind = Kind.of(parts[1], parts[2]);
      if (kind == null) {
        throw new IllegalArgumentException("a check these functions cannot make: " + line);
      }
      boundText = parts[3];
      boolean number = boundText.matches("-?[0-9]+");
      bound = number ? Long.parseLong(boundText) : 0L;
      boundIsField = !number && !boundText.equals("-");
      if (boundIsField && kind.name().startsWith("ABOVE_") && !FIELD_BOUNDS.contains(boundText)) {
        throw new IllegalArgumentException("a bound these functions cannot read: " + line);
      }
      when = parts[4].equals("-") ? null : utf8List(parts[4]);
    }
  }

  /** The checks, read once from their text (immutable: tasks may share them). */
  static final class Rules {
    final UTF8String spec;
    final List<Rule> checks = new ArrayList<>();
    final List<UTF8String> conditions;

    Rules(UTF8String spec) {
      this.spec = spec.clone(); // a row's text may be a view of memory Spark reuses
      List<UTF8String> names = new ArrayList<>();
      for (String line : spec.toString().split("\n")) {
        Rule rule = new Rule(line);
        checks.add(rule);
        if (rule.kind == Kind.UNKNOWN_CONDITION) {
          names = utf8List(rule.boundText);
        }
      }
      this.conditions = names;
    }
  }

  /** A few names: looked up by comparing bytes, cheaper than hashing them in every row. */
  private static List<UTF8String> utf8List(String spaced) {
    List<UTF8String> out = new ArrayList<>();
    for (String name : spaced.split(" ")) {
      out.add(UTF8String.fromString(name));
    }
    return out;
  }

  /** The checks last read (one text per query: read again only when it changes). */
  private static volatile Rules rules;

  /** The checks that {@code spec} gives (a literal: the same object in every row). */
  static Rules rules(UTF8String spec) {
    Rules known = rules;
    if (known == null || (known.spec != spec && !known.spec.equals(spec))) {
      known = new Rules(spec);
      rules = known;
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
   * The event time's reason, for events (contract.rules' ts checks):
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
      Long warnMs,
      Boolean noWarnMs,
      String checks) {
    Checked checked =
        check(utf8(opId), utf8(keysColumn), utf8(key), tsMs, noTs, latestTs, timeoutMs, noTimeout,
            utf8(conditionGiven), target, utf8(membersColumn), warnMs, noWarnMs, rules(utf8(checks)));
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
      UTF8String conditionGiven,
      Double target,
      List<UTF8String> membersColumn,
      Long warnMs,
      Boolean noWarnMs,
      Rules rules) {
    List<UTF8String> keys;
    if (keysColumn != null) {
      keys = clean(keysColumn, false);
    } else if (!blank(key)) {
      keys = new ArrayList<>(1);
      keys.add(key);
    } else {
      keys = null;
    }
    UTF8String cond = condition(conditionGiven, rules.conditions);
    List<UTF8String> members = clean(membersColumn, true);
    boolean known = rules.conditions.contains(cond);
    int nKeys = keys == null ? 0 : keys.size();
    int nMembers = members == null ? 0 : members.size();
    for (Rule rule : rules.checks) {
      if (rule.when != null && !(known && rule.when.contains(cond))) {
        continue;
      }
      boolean fails;
      switch (rule.kind) {
        case ABSENT_OP_ID: fails = blank(opId); break;
        case ABSENT_KEYS: fails = nKeys == 0; break;
        case MORE_KEYS: fails = nKeys > rule.bound; break;
        case ABSENT_TS: fails = Boolean.TRUE.equals(noTs); break;
        case UNREADABLE_TS: fails = tsMs == null; break;
        case FUTURE_TS: fails = latestTs != null && tsMs != null && tsMs > latestTs; break;
        case ABSENT_TIMEOUT_MS: fails = Boolean.TRUE.equals(noTimeout); break;
        case UNREADABLE_TIMEOUT_MS: fails = timeoutMs == null; break;
        case BELOW_TIMEOUT_MS: fails = timeoutMs != null && timeoutMs < rule.bound; break;
        case ABOVE_TIMEOUT_MS: fails = timeoutMs != null && timeoutMs > rule.bound; break;
        case UNKNOWN_CONDITION: fails = !known; break;
        case ABSENT_TARGET: fails = target == null; break;
        case NOT_FINITE_TARGET: fails = target != null && !Double.isFinite(target); break;
        case ABOVE_TARGET:
          fails = target != null && target > limit(rule, nMembers, timeoutMs);
          break;
        case GIVEN_TARGET: fails = target != null; break;
        case ABSENT_MEMBERS: fails = nMembers == 0; break;
        case MORE_MEMBERS: fails = nMembers > rule.bound; break;
        case GIVEN_MEMBERS: fails = nMembers > 0; break;
        // an optional field: its absence is no reason, a value that is no whole number is
        case UNREADABLE_WARN_MS: fails = !Boolean.TRUE.equals(noWarnMs) && warnMs == null; break;
        case BELOW_WARN_MS: fails = warnMs != null && warnMs < rule.bound; break;
        case ABOVE_WARN_MS: fails = warnMs != null && warnMs > limit(rule, nMembers, timeoutMs); break;
        default: throw new IllegalStateException("no such check: " + rule.kind);
      }
      if (fails) {
        return new Checked(rule.reason, keys, cond, members);
      }
    }
    return new Checked(null, keys, cond, members);
  }

  /** An {@code above} check's bound: its number, or the field it names (no bound when null). */
  private static double limit(Rule rule, int nMembers, Long timeoutMs) {
    if (!rule.boundIsField) {
      return rule.bound;
    }
    if (rule.boundText.equals("members")) {
      return nMembers;
    }
    return timeoutMs == null ? Double.POSITIVE_INFINITY : timeoutMs;
  }
}
