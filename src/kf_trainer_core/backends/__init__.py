"""Where a TrainJob runs: a cluster (``kubernetes/``, the transports over the kubernetes
clients), or this machine (``local/``: pods as processes, or as containers with
``local/container/``, which shares the local backend's state, API and supervisors)."""
