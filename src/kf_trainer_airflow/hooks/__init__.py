"""Hooks of the Kubeflow Trainer provider."""
