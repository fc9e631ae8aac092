"""The Kubernetes backend: the transports that perform calls with the kubernetes clients."""
