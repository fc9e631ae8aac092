"""Where a TrainJob runs: Kubernetes (the transports), the local and container backends."""
