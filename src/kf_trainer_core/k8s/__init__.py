"""Kubernetes plumbing shared by the sync and async clients: resources, the calls the
client logic makes (as data), the transports that perform them, and the retry policy."""
