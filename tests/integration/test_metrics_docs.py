"""The observability guide's table of where each Prometheus metric is produced names exactly the
metrics venturi registers (``RunMetrics`` and ``QueueMetrics``), under the names a
scrape shows (counters with ``_total``)."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

import venturi
from venturi.contrib.prometheus import QueueMetrics, RunMetrics

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "observability.md"


def scraped_names(app: venturi.App) -> set[str]:
    registry = CollectorRegistry()
    RunMetrics(app, registry=registry).close()
    families = [*registry.collect(), *QueueMetrics(app, registry=None).collect()]
    return {f.name + ("_total" if f.type == "counter" else "") for f in families}


def test_the_observability_guide_table_names_every_metric_and_only_those(app: venturi.App) -> None:
    table = [line for line in GUIDE.read_text().splitlines() if line.startswith("| `venturi_")]
    documented = {name for line in table for name in re.findall(r"`(venturi_[a-z_]+)", line)}
    assert documented == scraped_names(app)
