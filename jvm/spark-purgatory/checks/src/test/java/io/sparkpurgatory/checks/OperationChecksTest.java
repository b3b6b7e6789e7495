package io.sparkpurgatory.checks;

import static io.sparkpurgatory.checks.Rows.list;
import static io.sparkpurgatory.checks.Rows.seq;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

import scala.collection.Seq;

class OperationChecksTest {

  /** The contract's checks (a fixture: {@link Rows#CHECKS}). */
  private static final String NAMES = Rows.CHECKS;
  private static final long MAX_TIMEOUT = 1000L;
  private static final long LATEST_TS = 1000L;

  /** One operation's arguments, valid until a test spoils them. */
  private static final class Op {
    String opId = "o1";
    Seq<String> keys = null;
    String key = "k";
    Long tsMs = 500L;
    Boolean noTs = false;
    Long timeoutMs = 100L;
    Boolean noTimeout = false;
    String condition = null;
    Double target = null;
    Seq<String> members = null;
    Long warnMs = null;
    Boolean noWarnMs = true;
    String names = NAMES;

    Row check() {
      return new OperationChecks()
          .call(opId, keys, key, tsMs, noTs, LATEST_TS, timeoutMs, noTimeout, MAX_TIMEOUT,
              condition, target, members, warnMs, noWarnMs, names);
    }

    String reason() {
      return check().getString(0);
    }
  }

  @Test
  void keysAndMembersAboveTheirLimitsAreRejectedCountedOncePerDistinctItem() {
    Op op = new Op();
    op.names = NAMES.replace("keys\t1000", "keys\t2").replace("members\t1000", "members\t3");
    op.keys = seq("a", "b", "a", " ");
    assertNull(op.reason()); // two distinct keys: at the limit
    op.keys = seq("a", "b", "c");
    assertEquals("too_many_keys", op.reason());
    op.keys = null;
    op.condition = "all";
    op.members = seq("m1", "m2", "m3", "m1");
    assertNull(op.reason());
    op.members = seq("m1", "m2", "m3", "m4");
    assertEquals("too_many_members", op.reason());
  }

  @Test
  void aValidOperationHasNoReasonAndItsFieldsCleaned() {
    Op op = new Op();
    op.keys = seq("b", " ", "a", null, "b");
    op.condition = " QUORUM ";
    op.target = 2.0;
    op.members = seq("r2", "", "r1");
    Row row = op.check();
    assertNull(row.get(0));
    assertEquals(List.of("b", "a"), list(row, 1)); // in their order, each once
    assertEquals("quorum", row.getString(2));
    assertEquals(List.of("r1", "r2"), list(row, 3));
  }

  @Test
  void warnMsIsOptionalAWholeNumberFromOneToTheTimeout() {
    Op op = new Op();
    assertNull(op.reason()); // absent: no warning asked
    op.noWarnMs = false;
    op.warnMs = null; // given, but no whole number
    assertEquals("bad_warn_ms", op.reason());
    op.warnMs = 100L; // the whole timeout: the table's bound is the field timeout_ms
    assertNull(op.reason());
    op.warnMs = 101L;
    assertEquals("bad_warn_ms", op.reason());
    op.warnMs = 0L;
    assertEquals("bad_warn_ms", op.reason());
    op.timeoutMs = -1L; // the timeout's reason comes first
    assertEquals("negative_timeout", op.reason());
  }

  @Test
  void theReasonIsTheFirstFailingCheckInTheContractsOrder() {
    Op op = new Op();
    op.opId = " ";
    op.key = null;
    op.noTs = true;
    op.tsMs = null;
    op.noTimeout = true;
    op.timeoutMs = null;
    op.condition = "most";
    List<String> seen = new ArrayList<>();
    List<Runnable> fixes =
        List.of(
            () -> op.opId = "o1",
            () -> op.key = "k",
            () -> op.noTs = false, // ts present, yet unreadable
            () -> op.tsMs = LATEST_TS + 1,
            () -> op.tsMs = LATEST_TS,
            () -> op.noTimeout = false, // timeout present, yet not a whole number
            () -> op.timeoutMs = -1L,
            () -> op.timeoutMs = MAX_TIMEOUT + 1,
            () -> op.timeoutMs = MAX_TIMEOUT,
            () -> op.condition = "sum",
            () -> op.target = Double.NaN,
            () -> op.target = 2.0,
            () -> op.condition = "quorum",
            () -> op.members = seq("r1", " "), // one distinct member, short of the target
            () -> op.condition = "any", // uses neither the target nor the members
            () -> op.target = null,
            () -> op.members = null);
    seen.add(op.reason());
    for (Runnable fix : fixes) {
      fix.run();
      seen.add(op.reason());
    }
    List<String> expected = new ArrayList<>(
        List.of(
            "missing_op_id",
            "missing_key",
            "missing_ts",
            "bad_ts",
            "ts_in_future",
            "missing_timeout_ms",
            "bad_timeout_ms",
            "negative_timeout",
            "timeout_above_max",
            "unknown_condition",
            "missing_target",
            "bad_target"));
    expected.add(null); // sum 2
    expected.addAll(
        List.of("missing_members", "target_above_members", "unused_target", "unused_members"));
    expected.add(null);
    assertEquals(expected, seen);
  }

  @Test
  void aTargetMustBeFiniteForTheConditionsThatNeedOne() {
    for (String condition : List.of("count", "sum", "offset", "quorum")) {
      for (double target : new double[] {Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY}) {
        Op op = new Op();
        op.condition = condition;
        op.target = target;
        assertEquals("bad_target", op.reason(), condition + " " + target);
      }
    }
    Op any = new Op();
    any.target = Double.NaN;
    assertEquals("unused_target", any.reason()); // given, though no number: not ignored
  }

  @Test
  void aFieldTheConditionDoesNotUseIsRejectedNotIgnored() {
    for (String condition : List.of("any", "all")) {
      Op op = new Op();
      op.condition = condition;
      op.members = seq("r1");
      op.target = 1.0;
      assertEquals("unused_target", op.reason(), condition);
    }
    for (String condition : List.of("any", "count", "sum", "offset")) {
      Op op = new Op();
      op.condition = condition;
      op.target = condition.equals("any") ? null : 1.0;
      op.members = seq("r1");
      assertEquals("unused_members", op.reason(), condition);
      op.members = seq(" ", null); // no member given: nothing unused
      assertNull(op.reason(), condition);
    }
  }

  @Test
  void aQuorumNeedsATargetAndMembersAndNoMoreTargetThanDistinctMembers() {
    Op op = new Op();
    op.condition = "quorum";
    assertEquals("missing_target", op.reason());
    op.target = 2.0;
    assertEquals("missing_members", op.reason());
    op.members = seq("r1", "r1", " ");
    assertEquals("target_above_members", op.reason());
    op.members = seq("r1", "r2", "r1");
    Row row = op.check();
    assertNull(row.get(0));
    assertEquals(List.of("r1", "r2"), list(row, 3));
    op.target = 0.0; // held at once, as count with nothing to reach
    assertNull(op.reason());
  }

  @Test
  void theKeysColumnWinsOverTheKeyAndOnlyBlankItemsAreDropped() {
    Op op = new Op();
    op.keys = seq(" ", "");
    assertEquals("missing_key", op.reason()); // the key column is not read when keys is given
    op.keys = seq("\t");
    Row row = op.check();
    assertNull(row.get(0)); // blank is spaces only (U+0020), as Spark's trim
    assertEquals(List.of("\t"), list(row, 1));
    op.keys = null;
    op.key = "  ";
    assertEquals("missing_key", op.reason());
  }

  @Test
  void membersAreSortedByCodePointAsSparkSortsStringsAndKeysKeepTheirOrder() {
    Op op = new Op();
    op.condition = "all";
    // UTF-16 order would put the emoji (a surrogate pair, 0xD83D...) before U+FFFF
    op.members = seq("\uD83D\uDE00", "\uFFFF", "\u00E9", "b");
    op.keys = seq("\uD83D\uDE00", "\uFFFF", "\u00E9", "b");
    Row row = op.check();
    assertEquals(List.of("b", "\u00E9", "\uFFFF", "\uD83D\uDE00"), list(row, 3));
    assertEquals(List.of("\uD83D\uDE00", "\uFFFF", "\u00E9", "b"), list(row, 1));
  }

  @Test
  void theConditionIsTrimmedAndLoweredForAsciiCapitalsAndTheKelvinSignOnly() {
    Op op = new Op();
    assertEquals("any", op.check().getString(2)); // absent
    op.condition = "  Any ";
    assertEquals("any", op.check().getString(2));
    op.condition = "\u212A";
    assertEquals("k", op.check().getString(2));
    op.condition = "\u0130LL"; // Turkish capital dotted I: not lowered to i
    Row row = op.check();
    assertEquals("\u0130ll", row.getString(2));
    assertEquals("unknown_condition", row.getString(0));
  }

  @Test
  void allNeedsMembersThatAreNotBlank() {
    Op op = new Op();
    op.condition = "all";
    assertEquals("missing_members", op.reason());
    op.members = seq(" ", null);
    assertEquals("missing_members", op.reason());
    op.members = seq("r1", "r1");
    Row row = op.check();
    assertNull(row.get(0));
    assertEquals(List.of("r1"), list(row, 3));
  }

  @Test
  void theChecksAreReadFromTheirTextNotAssumed() {
    OperationChecks checks = new OperationChecks(); // one instance: its cache must follow the text
    Row usual = checks.call("o1", null, "k", 1L, false, null, 1L, false, 10L, "any", null, null, null, true, NAMES);
    assertNull(usual.get(0));
    Row other =
        checks.call("o1", null, "k", 1L, false, null, 1L, false, 10L, "any", null, null, null, true, OTHER);
    assertEquals("missing_target", other.getString(0));
  }

  /** Other checks: other condition names, one of them needing a target. */
  private static final String OTHER =
      "unknown_condition\tunknown\tcondition\tany wait\t-\nmissing_target\tabsent\ttarget\t-\tany";

  @Test
  void aCheckTheFunctionsCannotMakeIsRefusedWhenRead() {
    // a test the functions do not make on that field; a bound they cannot read
    for (String check :
        List.of("bad_payload\tbelow\tpayload\t1\t-", "bad_warn_ms\tabove\twarn_ms\tpayload\t-")) {
      org.junit.jupiter.api.Assertions.assertThrows(
          IllegalArgumentException.class, () -> OperationChecks.rules(OperationChecks.utf8(check)));
    }
  }

  @Test
  void withoutALatestAcceptedTimeAnyReadableTsIsAccepted() {
    Row row =
        new OperationChecks()
            .call("o1", null, "k", Long.MAX_VALUE, false, null, 1L, false, 10L, null, null, null, null, true, NAMES);
    assertNull(row.get(0));
  }
}
