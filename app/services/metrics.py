"""Per-dataset gauges for ``/metrics``, computed at scrape time from the totals rows.

``fraction_used`` is the spend over the budget the dataset's state is judged by: its budget, or
on a time-partitioned dataset its lifetime budget (absent without one: every block has its own
budget, and the dataset as a whole is never used up).

One ``SELECT`` of ``dataset`` joined to ``dataset_total`` (O(datasets), no ledger or
reservation row read, no conversion: the spend is the one the filter stored at the last
admission). Because it reads the database, the collector gives the same answer in any worker
process, with or without ``PROMETHEUS_MULTIPROC_DIR``. Archived datasets are left out. When
the database does not answer, the gauges are absent and ``/metrics`` still answers.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from app.db.engine import Database
from app.db.models import Dataset, DatasetTotal
from app.errors import ProblemError

LABELS = ("dataset", "dataset_id")
_QUERY = (
    select(
        Dataset.id,
        Dataset.name,
        Dataset.budget_epsilon,
        Dataset.partition_unit,
        Dataset.lifetime_budget_epsilon,
        DatasetTotal.spent_epsilon,
        DatasetTotal.held_count,
    )
    .join_from(Dataset, DatasetTotal)
    .where(Dataset.archived_at.is_(None))
    .order_by(Dataset.name)
)


class DatasetCollector(Collector):
    """``privacy_ledger_dataset_{spent_epsilon,budget_epsilon,fraction_used,active_holds}``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        spent = GaugeMetricFamily(
            "privacy_ledger_dataset_spent_epsilon",
            "epsilon spent at the budget delta (ledger, without holds)",
            labels=LABELS,
        )
        budget = GaugeMetricFamily(
            "privacy_ledger_dataset_budget_epsilon", "the dataset's budget epsilon", labels=LABELS
        )
        fraction = GaugeMetricFamily(
            "privacy_ledger_dataset_fraction_used",
            "spent epsilon / budget epsilon (a time-partitioned dataset: / its lifetime budget "
            "epsilon, absent without one)",
            labels=LABELS,
        )
        holds = GaugeMetricFamily(
            "privacy_ledger_dataset_active_holds", "active reservations", labels=LABELS
        )
        try:
            with self.db.read() as s:
                rows = s.execute(_QUERY).all()
        except (SQLAlchemyError, ProblemError):
            # the database is down: /metrics still answers (its error counters say why)
            rows = []
        for row in rows:
            labels = [row.name, row.id]
            spent.add_metric(labels, row.spent_epsilon)
            budget.add_metric(labels, row.budget_epsilon)
            # a partitioned dataset's spent is its lifetime spend and its budget is each block's:
            # the fraction is of the lifetime budget (each block's own is in GET .../blocks)
            whole = (
                row.budget_epsilon if row.partition_unit is None else row.lifetime_budget_epsilon
            )
            if whole is not None:
                fraction.add_metric(labels, row.spent_epsilon / whole if whole > 0 else 1.0)
            holds.add_metric(labels, float(row.held_count))
        yield from (spent, budget, fraction, holds)


__all__ = ["DatasetCollector"]
