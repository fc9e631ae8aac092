"""The one emulation of the Kubernetes API that the local backend and the test bed
serve: what the generic apiserver registry does with an object whatever stores it.

* :mod:`.registry` — the vocabulary: which resources are served, which have a status
  subresource or a ``metadata.generation``, watch events, admission hooks, names,
  timestamps and resourceVersions.
* :mod:`.strategy` — the registry's rules for a write: create (names, ``generateName``,
  system metadata), update and the status subresource, patches with their
  resourceVersion precondition, a delete's preconditions and propagation policy, and
  the ``Status`` a delete answers with.
* :mod:`.paging` — how a list answers: which version it reads (``resourceVersion``,
  ``resourceVersionMatch`` and their errors), ``limit``/``continue``: one token format,
  one page rule.
* :mod:`.selection` — what a list or watch selects (namespace, label and field
  selectors, the 400 of a field the registry does not support), and how a watch reports
  an object entering or leaving its selector.
* :mod:`.watch` — what a watch stream says: event lines, bookmarks, the ``410`` of an
  expired version.
* :mod:`.kubelet` — what a kubelet does to a container whatever runs it: the
  environment it resolves (``envFrom``, ``env``, ``$(VAR)``, Secret and ConfigMap keys,
  field references), a signal's exit code, the termination-message file.
* :mod:`.logs` — container logs: the line stamps, and the ``pods/log`` query (which
  container, whether it started, ``sinceTime``, ``tailLines``, ``timestamps``,
  ``limitBytes``).
* :mod:`.jobs` — the JobSet and Job controllers: the pod a Job makes (labels, defaults),
  the TrainJob's trainer and initializers over the runtime's containers, and how pods
  and Jobs flow up into ``replicatedJobsStatus`` and ``jobsStatus``.

Two engines keep the objects, because their owners differ: the test bed's in-memory
store (``testing/store``: one process, history to list at an earlier version, owner
cascades and a garbage collector's timing) and the local backend's SQLite store
(``backends/local/store.py``: shared by the submitting client, the job's supervisor
and a triggerer, across processes and restarts). Both take every rule from here, so a
write answers the same on either, and the conformance tests that hold the test bed to
the real control plane hold the local backend's rules too.

Standard library and :mod:`kf_trainer_core.k8s` only: the local backend's supervisor
imports it on every job start, and the local backend needs no ``testing`` extra.
"""
