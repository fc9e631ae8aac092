"""Triggers of the Kubeflow Trainer provider."""
