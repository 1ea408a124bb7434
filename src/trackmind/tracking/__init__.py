"""Tracking helpers: plots of races for MLflow and evaluation."""
