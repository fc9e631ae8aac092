"""What the cluster says: a TrainJob's status, failures, Kueue, cost, summaries, results."""
