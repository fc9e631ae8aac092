"""The TrainJob manifest: the builder, the runtimes it resolves, lineage stamping,
selectors.
"""
