"""Spark SQL written as text with named holes, filled with expressions of a select list: how the
rewrites of `app.plan.flink_arithmetic` and `app.plan.flink_time` say what Spark must compute."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

VALUE = "__value"  # the hole of a template's `value`


def spark_template(template: str, **values: exp.Expression) -> exp.Expression:
    """`template`, Spark SQL, with each of `values` where it names the column `__<name>`."""
    tree = sqlglot.parse_one(template, read="spark")
    for column in list(tree.find_all(exp.Column)):
        if column.name.startswith("__") and column.name[2:] in values:
            column.replace(values[column.name[2:]].copy())
    return tree
