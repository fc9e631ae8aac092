"""The client's logic, written once as programs (generators of the calls of
:mod:`kf_trainer_core.k8s.calls`) that the sync and the async driver both run:
:mod:`~.reads`, :mod:`~.submit`, :mod:`~.logs`, :mod:`~.outcome`, :mod:`~.cancel` and
:mod:`~.wait`."""
