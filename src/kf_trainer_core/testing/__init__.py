"""Test tools for kf-trainer-suite users: a Kubernetes-API test server, a simulated
Trainer controller and a CRD validator, so that DAGs, flows and pipelines can be tested
over real HTTP without a cluster."""
