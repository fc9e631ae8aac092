"""Shared test set-up: the Kubernetes-API test server fixtures."""
