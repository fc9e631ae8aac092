"""Operators of the Kubeflow Trainer provider."""
