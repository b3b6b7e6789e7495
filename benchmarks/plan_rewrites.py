"""Which of Catalyst's optimizer rules rewrite ``start()``'s plan, and what they change.

Spark optimizes a streaming query's whole plan again in every micro-batch; a batch of rules
runs until no rule changes the plan, so every rule that rewrites it costs a further pass of
its batch over the whole plan, every micro-batch (docs/performance-history.md, "eighth round").  A
plan built as the optimizer leaves it is optimized in one pass per batch.

This builds the plan ``bench_optimizer.py`` builds (``start_plan``: typed Parquet inputs, the
staged shards, the observed metrics, the wake input), applies the session's optimizer batch by batch and
rule by rule as Spark's ``RuleExecutor`` does (a batch to its fixed point), and prints each
batch that took more than one pass, each rule that changed the plan, and the lines of the
plan it changed (expression ids dropped).

    .venv/bin/python benchmarks/plan_rewrites.py [--lines 4] [--width 240]
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _changed_lines(before: str, after: str) -> list[str]:
    """The plan's lines a rule removed (-) and added (+), expression ids dropped."""
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    changed = [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    return [re.sub(r"#\d+L?", "", line) for line in changed]


def rewrites(spark, plan, shown: int, width: int) -> int:
    """Apply the session's optimizer to ``plan`` rule by rule; print the rewrites; their count."""
    optimizer = spark._jsparkSession.sessionState().optimizer()
    excluded = set(spark.conf.get("spark.sql.optimizer.excludedRules", "").split(","))
    batches, count = optimizer.batches(), 0
    for b in range(batches.size()):
        batch = batches.apply(b)
        rules = batch.rules()
        for passes in range(1, batch.strategy().maxIterations() + 1):
            changed = False
            for r in range(rules.size()):
                rule = rules.apply(r)
                if rule.ruleName() in excluded:
                    continue
                rewritten = rule.apply(plan)
                if rewritten.fastEquals(plan):
                    continue
                lines = _changed_lines(plan.toString(), rewritten.toString())
                name = rule.ruleName().rsplit(".", 1)[-1]
                print(f"  {batch.name()}, pass {passes}: {name} ({len(lines)} lines)")
                for line in lines[:shown]:
                    print(f"      {line.strip()[:width]}")
                plan, changed, count = rewritten, True, count + 1
            if not changed:
                break
        if passes > 1:
            print(f"= {batch.name()}: {passes} passes")
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=4, help="changed lines shown per rewrite")
    parser.add_argument("--width", type=int, default=240, help="characters shown per line")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from bench_optimizer import start_plan

    from spark_purgatory.runtime.settings import optimizer_rules

    with start_plan("plan-rewrites") as built, optimizer_rules(built.spark):
        print("start()'s plan, the session's optimizer rule by rule (start()'s rule exclusions applied):")
        analyzed = built.plan._jdf.queryExecution().analyzed()
        count = rewrites(built.spark, analyzed, args.lines, args.width)
    print(f"{count} rewrites")
    return 0


if __name__ == "__main__":
    sys.exit(main())
