"""The spec's vocabulary, cheap to import: the model base, field checks, Kubernetes names,
the Retention option.
"""
