"""Shared test set-up: the Kubernetes-API test server fixtures (``kube``,
``kube_server``, ``kubeconfig_path``) for every test directory."""

pytest_plugins = ["kf_trainer_core.testing.pytest_plugin"]
