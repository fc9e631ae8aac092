"""kf-trainer-suite core: Kubeflow Trainer v2 TrainJobs from typed, JSON-serialisable specs."""
