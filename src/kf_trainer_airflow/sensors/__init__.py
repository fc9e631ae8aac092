"""Sensors of the Kubeflow Trainer provider."""
