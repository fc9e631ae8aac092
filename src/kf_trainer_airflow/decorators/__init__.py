"""Decorators of the Kubeflow Trainer provider."""
