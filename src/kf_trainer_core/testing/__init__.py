"""Test tools for kf-trainer-suite users: a Kubernetes-API test server, a simulated
Trainer controller and a CRD validator, so that DAGs, flows and pipelines can be tested
over real HTTP without a cluster; and a real control plane for the tests that need one.

What users' tests import stands at the top (docs/testing.md):

* :mod:`.pytest_plugin` - the fixtures (``kube``, ``kubeconfig_path``, ``control_plane``, ...);
* :mod:`.server` - :class:`~kf_trainer_core.testing.server.KubeTestServer`;
* :mod:`.scenarios` - how a simulated TrainJob behaves (``SCENARIO_ANNOTATION``, ``Scenario``);
* :mod:`.faults` - a misbehaving API server; :mod:`.netfaults` - a misbehaving network (a TCP
  proxy: black-holes, drips, resets, 401s); :mod:`.status_server` - the TrainJob status server;
* :mod:`.population` - crowded namespaces; :mod:`.runtimes`, :mod:`.builtin_runtimes` - the
  default runtimes; :mod:`.kwok` - pod behaviours on the real control plane's kwok nodes;
  :mod:`.loopwatch` - what blocks an event loop.

The rest is grouped by concept: :mod:`.store` (the served objects), :mod:`.controller`
(the simulated controllers and kubelet), :mod:`.crd` (schemas, CEL, validation),
:mod:`.kueue` (the simulated Kueue) and :mod:`.control_plane` (the real one).
"""
