"""Links of the Kubeflow Trainer provider."""
