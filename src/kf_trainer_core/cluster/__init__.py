"""What the cluster says: a TrainJob's status, failures, Kueue, cost, summaries, results,
and the errors about a job's outcome, which carry what it said."""
