"""Metric names MLflow accepts, whatever a map is called."""

from __future__ import annotations

import re


def metric_map_name(name: str) -> str:
    """A map's name as one MLflow metric-path component: characters MLflow refuses (':' of
    procedural:7) and '/' (a map file's folders) become '_', so race/<map>/<metric> keeps
    three parts and MLflow logs it under the same name without a warning."""
    return re.sub(r"[^A-Za-z0-9_.\- ]", "_", name)
