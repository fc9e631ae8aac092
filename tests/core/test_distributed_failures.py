"""Failure classes of distributed training: torchrun's summary, the workers' own errors
and the known texts of CUDA, NCCL, gloo and c10d (``kf_trainer_core.cluster.distributed``,
used by ``classify`` on every backend).

Two corpora: ``torchrun_logs/`` holds logs of real torchrun runs on this machine (gloo,
CPU: a SIGKILLed worker, a ValueError in rank 1 of 2, a two-node job, a peer that never
joins, a master out of reach); ``torchrun_texts`` composes, in the same shape, the GPU
failures from their documented texts. Before this module, every one of them was classed
``user-code`` with torchrun's banner as the evidence.
"""

from __future__ import annotations

from typing import Any

import pytest
from torchrun_texts import CUDA_TRAILER, Worker, fixture, torchrun_log, traceback

from kf_trainer_core.cluster import distributed
from kf_trainer_core.cluster.failures import classify
from kf_trainer_core.cluster.root_cause import failed_nodes, root_cause_node, suspect_nodes
from kf_trainer_core.cluster.status import Failure, failure_of
from kf_trainer_core.errors import FailureClass

INFRA = FailureClass.INFRASTRUCTURE
CAPACITY = FailureClass.CAPACITY
CONFIG = FailureClass.CONFIGURATION
USER = FailureClass.USER_CODE


def classified(lines: list[str], **kw: Any) -> tuple[FailureClass, str]:
    """What ``classify`` makes of a failed node's log (torchrun exits 1)."""
    kw.setdefault("exit_code", 1)
    kw.setdefault("container_reason", "Error")
    return classify(log_tail=lines, step="node-0", **kw)


def assert_no_banner(evidence: str) -> None:
    assert "====" not in evidence, evidence
    assert "----" not in evidence, evidence
    assert "ChildFailedError" not in evidence, evidence


# ------------------------------------------------------------- captured here (gloo)

CAPTURED = [
    ("gloo_worker_sigkill.log", INFRA, "rank 0 on node-0 was killed by SIGKILL"),
    ("gloo_valueerror_rank1.log", USER,
     "rank 1 on node-0: the training code raised ValueError: bad learning rate: -0.1"),
    ("gloo_valueerror_rank1_record.log", USER,
     "rank 1 on node-0: the training code raised ValueError: bad learning rate: -0.1"),
    ("gloo_two_nodes_node1.log", USER,
     "rank 1 on node-0: the training code raised ValueError: bad learning rate: -0.1"),
    ("gloo_two_nodes_node0.log", INFRA, "rank 0 on node-0 lost a peer"),
    ("gloo_peer_never_joins.log", INFRA,
     "could not rendezvous with the other nodes (a peer that never joined, or the master "
     "out of reach): torch.distributed.DistStoreError: Timed out after 6 seconds waiting "
     "for clients. 1/2 clients joined."),
    ("gloo_master_unreachable.log", INFRA,
     "could not rendezvous with the other nodes (a peer that never joined, or the master "
     "out of reach): torch.distributed.DistNetworkError: The client socket has timed out"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "klass", "evidence"), CAPTURED)
def test_captured_torchrun_failures(name: str, klass: FailureClass, evidence: str) -> None:
    found, why = classified(fixture(name))
    assert (found, evidence in why) == (klass, True), why
    assert_no_banner(why)


def test_a_sigkilled_worker_is_retried_by_default() -> None:
    from kf_trainer_core.cluster.failures import DEFAULT_RETRY_ON

    found, _ = classified(fixture("gloo_worker_sigkill.log"))
    assert found in DEFAULT_RETRY_ON


def test_the_summary_is_read_field_by_field() -> None:
    (root, other) = distributed.parse_summary(fixture("gloo_valueerror_rank1.log"))
    assert (root.rank, root.local_rank, root.exit_code, root.root_cause) == (1, 1, 1, True)
    assert root.host == "localhost"
    assert root.signal is None
    assert (other.rank, other.exit_code, other.signal, other.root_cause) == (
        0,
        -15,
        "SIGTERM",
        False,
    )
    (killed,) = distributed.parse_summary(fixture("gloo_worker_sigkill.log"))
    assert (killed.exit_code, killed.signal) == (-9, "SIGKILL")


def test_an_error_file_traceback_in_the_summary_is_the_workers_error() -> None:
    root, other = distributed.parse_summary(fixture("gloo_valueerror_rank1_record.log"))
    assert root.error == ("ValueError: bad learning rate: -0.1",)
    assert other.error[0].startswith("RuntimeError: [")
    assert "Connection closed by peer" in other.error[0]


def test_the_workers_own_errors_are_found_by_their_prefix() -> None:
    errors = distributed.worker_errors(fixture("gloo_valueerror_rank1.log"))
    assert errors[("rank", 1)] == [("ValueError: bad learning rate: -0.1",)]
    assert "Connection closed by peer" in errors[("rank", 0)][0][0]
    assert None not in errors  # torchrun's own ChildFailedError is no worker's error


# ------------------------------------------------------------- documented GPU texts

OOM = Worker(
    0,
    traceback(
        [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 TiB. GPU 0 has a "
            "total capacity of 79.19 GiB of which 78.62 GiB is free. Of the allocated memory 0 bytes "
            "is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.",
        ]
    ),
)
DUPLICATE = [
    Worker(
        r,
        traceback(
            [
                "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
                "c10d/ProcessGroupNCCL.cpp:3356, invalid usage (run with NCCL_DEBUG=WARN for details), "
                "NCCL version 2.21.5",
                "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
                "Last error:",
                f"Duplicate GPU detected : rank {r} and rank {1 - r} both on CUDA device 1b000",
            ],
            call="dist.all_reduce(x)",
        ),
    )
    for r in (0, 1)
]
ILLEGAL = Worker(
    0,
    traceback(
        ["RuntimeError: CUDA error: an illegal memory access was encountered", *CUDA_TRAILER]
    ),
)
ECC = Worker(
    0, traceback(["RuntimeError: CUDA error: uncorrectable ECC error encountered", *CUDA_TRAILER])
)
NVLINK = Worker(
    0,
    traceback(
        [
            "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
            *CUDA_TRAILER,
        ]
    ),
)
XID = Worker(
    0,
    [
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        *traceback(["RuntimeError: CUDA error: unspecified launch failure", *CUDA_TRAILER]),
    ],
)
ASSERT = Worker(
    0, traceback(["RuntimeError: CUDA error: device-side assert triggered", *CUDA_TRAILER])
)
ORDINAL = Worker(3, traceback(["RuntimeError: CUDA error: invalid device ordinal", *CUDA_TRAILER]))
NO_GPU = Worker(0, traceback(["RuntimeError: No CUDA GPUs are available"]))
HOST_OOM = Worker(0, traceback(["MemoryError"]))
WATCHDOG = Worker(
    0,
    [
        "[E1127 09:31:02.118000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1048576, "
        "NumelOut=1048576, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
    ],
    exitcode=-6,
)
REMOTE = Worker(
    0,
    traceback(
        [
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
            "NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.21.5",
            "ncclRemoteError: A call failed possibly due to a network error or a remote process "
            "exiting prematurely.",
            "Last error:",
            "NET/IB : Got completion from peer 10.1.2.3<44017> with status=12 opcode=0 len=0 "
            "vendor err 129 (Recv)",
        ],
        call="dist.all_reduce(x)",
    ),
)
SYSTEM = Worker(
    0,
    traceback(
        [
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
            "details), NCCL version 2.21.5",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
            "device error.",
            "Last error:",
            "socketStartConnect: Connect to 10.1.2.3<35817> failed : Software caused connection abort",
        ],
        call="dist.barrier()",
    ),
)
REFUSED = Worker(
    0,
    traceback(
        [
            "torch.distributed.DistNetworkError: Connection refused: failed to connect to "
            "train-node-0-0.train:29500",
        ],
        call="dist.init_process_group('nccl')",
    ),
)
SEGV = Worker(0, ["Fatal Python error: Segmentation fault"], exitcode=-11)
KILLED_137 = Worker(0, ["step 10 done"], exitcode=137)

DOCUMENTED = [
    ("cuda-oom", [OOM], 0, CAPACITY,
     "rank 0 on node-0 ran out of GPU memory: torch.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 3.91 TiB."),
    ("nccl-duplicate-gpu", DUPLICATE, 0, CONFIG,
     "rank 0 on node-0 was given the same GPU as another process: Duplicate GPU detected : "
     "rank 0 and rank 1 both on CUDA device 1b000"),
    ("illegal-memory-access", [ILLEGAL], 0, USER,
     "accessed memory out of bounds (a bad index or a custom kernel: the code's fault, not "
     "the hardware's): RuntimeError: CUDA error: an illegal memory access was encountered"),
    ("uncorrectable-ecc", [ECC], 0, INFRA,
     "met a GPU hardware fault: RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    ("uncorrectable-nvlink", [NVLINK], 0, INFRA, "met a GPU hardware fault"),
    ("xid-fallen-off-the-bus", [XID], 0, INFRA, "met a GPU hardware fault: NVRM: Xid"),
    ("device-side-assert", [ASSERT], 0, USER, "failed a device-side assertion"),
    ("invalid-device-ordinal", [ORDINAL], 0, CONFIG,
     "rank 3 on node-0 asked for a GPU its node was not given"),
    ("no-gpu", [NO_GPU], 0, CONFIG, "found no GPU on its node"),
    ("host-memory", [HOST_OOM], 0, CAPACITY, "ran out of host memory: MemoryError"),
    ("nccl-watchdog-timeout", [WATCHDOG], 0, INFRA,
     "timed out in a collective operation (a peer stopped, hung or was cut off): [E1127"),
    ("nccl-remote-error", [REMOTE], 0, INFRA, "lost a peer or the network between the nodes"),
    ("nccl-unhandled-system-error", [SYSTEM], 0, INFRA, "unhandled system error"),
    ("master-refused", [REFUSED], 0, INFRA, "could not rendezvous with the other nodes"),
    ("segfault", [SEGV], 0, USER, "rank 0 on node-0 crashed (SIGSEGV)"),
    ("killed-under-a-shell", [KILLED_137], 0, INFRA, "was killed by SIGKILL"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("workers", "root", "klass", "evidence"),
    [case[1:] for case in DOCUMENTED],
    ids=[case[0] for case in DOCUMENTED],
)
def test_documented_gpu_failures(
    workers: list[Worker], root: int, klass: FailureClass, evidence: str
) -> None:
    found, why = classified(torchrun_log(*workers, root=root))
    assert (found, evidence in why) == (klass, True), why
    assert_no_banner(why)


def test_a_peers_consequence_is_never_the_root_cause() -> None:
    # Rank 1 ran out of memory; rank 0 then timed out in its collective and was
    # SIGTERMed. torchrun saw rank 0 first: the root cause is still rank 1's OOM.
    oom = Worker(1, OOM.output)
    log = torchrun_log(WATCHDOG, oom, root=0)
    found, why = classified(log)
    assert found is CAPACITY, why
    assert why.startswith("rank 1 on node-0 ran out of GPU memory"), why


# ------------------------------------------------------------- across nodes


def test_across_nodes_the_node_that_failed_first_is_named() -> None:
    logs = {
        "node-0": fixture("gloo_two_nodes_node0.log"),
        "node-1": fixture("gloo_two_nodes_node1.log"),
    }
    found = distributed.first_failure(logs)
    assert found is not None
    node, cause = found
    assert node == "node-1"
    assert cause.evidence() == (
        "rank 1 on node-1: the training code raised ValueError: bad learning rate: -0.1"
    )


def test_across_nodes_the_earliest_of_own_failures_wins() -> None:
    # Both nodes failed on their own: the one whose agent saw it first (glog times).
    later = [line.replace("E1127 09:41:07.118000", "E1127 09:41:09.500000") for line in
             torchrun_log(Worker(0, OOM.output))]  # fmt: skip
    earlier = torchrun_log(Worker(1, ECC.output))
    found = distributed.first_failure({"node-0": later, "node-1": earlier})
    assert found is not None
    assert found[0] == "node-1"
    assert found[1].failure_class is INFRA


def pod(node: int, code: int, message: str = "") -> dict[str, Any]:
    terminated: dict[str, Any] = {"exitCode": code, "reason": "Error"}
    if message:
        terminated["message"] = message
    return {
        "metadata": {
            "name": f"job-node-0-{node}-abcde",
            "creationTimestamp": "2026-11-27T09:40:00Z",
            "labels": {
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "batch.kubernetes.io/job-completion-index": str(node),
            },
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "node", "state": {"terminated": terminated}}],
        },
    }


FAILED_JOB = {
    "metadata": {"name": "job"},
    "status": {
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "FailedJobs",
             "message": "jobset failed due to one or more job failures"}
        ]
    },
}  # fmt: skip


def kubelet_message(lines: list[str]) -> str:
    """What FallbackToLogsOnError keeps of a log: its last 80 lines or 2048 bytes,
    whichever is less."""
    return "\n".join(lines[-80:]).encode()[-2048:].decode(errors="ignore")


def test_the_root_cause_node_from_termination_messages_alone() -> None:
    # kwok's pods and nodes gone after the job serve no log: each pod's termination
    # message (the log's end: the summary, and here the worker's error) is all there
    # is. node-0's worker timed out and was SIGTERMed because node-1's ran out of memory.
    node0 = kubelet_message(torchrun_log(Worker(0, WATCHDOG.output[:1], exitcode=-15)))
    node1 = kubelet_message(torchrun_log(Worker(1, OOM.output)))
    pods = [pod(0, 1, node0), pod(1, 1, node1)]
    assert [step for step, _ in failed_nodes(pods)] == ["node-0", "node-1"]
    first = root_cause_node(pods)
    assert first == "node-1"
    failure = failure_of(FAILED_JOB, pods, first=first)
    assert (failure.step, failure.failure_class) == ("node-1", CAPACITY)
    assert failure.classified_by.startswith("rank 1 on node-1 ran out of GPU memory: torch.")


def test_the_root_cause_node_from_logs() -> None:
    node0, node1 = fixture("gloo_two_nodes_node0.log"), fixture("gloo_two_nodes_node1.log")
    pods = [pod(0, 1, kubelet_message(node0)), pod(1, 1, kubelet_message(node1))]
    # What the kubelet keeps: both exited 1; torchrun's agent on node-1 saw its
    # worker fail half a second before node-0's (glog's times).
    assert root_cause_node(pods) == "node-1"
    first = root_cause_node(pods, {"node-0": node0, "node-1": node1})
    assert first == "node-1"
    failure = failure_of(FAILED_JOB, pods, log_tail=node1, first=first)
    assert failure.step == "node-1"
    assert failure.pod == "job-node-0-1-abcde"
    assert failure.failure_class is USER
    assert "rank 1 on node-1: the training code raised ValueError" in failure.classified_by


def being_stopped(node: int) -> dict[str, Any]:
    """A node's pod that still runs while the JobSet that failed deletes it."""
    running = pod(node, 0)
    running["metadata"]["deletionTimestamp"] = "2026-11-27T09:41:00Z"
    running["status"] = {
        "phase": "Running",
        "containerStatuses": [{"name": "node", "state": {"running": {}}}],
    }
    return running


def test_a_root_cause_still_being_stopped_is_named() -> None:
    # node-1's worker raised, but its torchrun had not ended when node-0's, which only
    # lost its peer, failed the JobSet: node-1 is being stopped, its log says why.
    node0 = fixture("gloo_two_nodes_node0.log")
    node1 = fixture("gloo_two_nodes_node1.log")[:9]  # the worker's error, not yet the summary
    pods = [pod(0, 1, kubelet_message(node0)), being_stopped(1)]
    assert [step for step, _ in failed_nodes(pods)] == ["node-0"]
    assert [step for step, _ in suspect_nodes(pods)] == ["node-0", "node-1"]
    assert root_cause_node(pods) == "node-0"  # without node-1's log: only the consequence
    first = root_cause_node(pods, {"node-0": node0, "node-1": node1})
    assert first == "node-1"
    failure = failure_of(FAILED_JOB, pods, log_tail=node1, first=first)
    assert (failure.step, failure.pod) == ("node-1", "job-node-0-1-abcde")
    assert failure.failure_class is USER
    assert failure.classified_by == (
        "rank 1 on node-1: the training code raised ValueError: bad learning rate: -0.1"
    )


def test_a_succeeded_node_is_no_suspect() -> None:
    done = pod(1, 0)
    done["status"]["phase"] = "Succeeded"
    assert [step for step, _ in suspect_nodes([pod(0, 1), done, being_stopped(2)])] == [
        "node-0",
        "node-2",
    ]


def test_failure_of_with_logs_keeps_the_shown_lines_and_drops_torchruns_frames() -> None:
    log = fixture("gloo_valueerror_rank1.log")
    failure = failure_of(FAILED_JOB, [pod(0, 1)], log_tail=log, first="node-0", shown=40)
    assert failure.failure_class is USER
    assert len(failure.log_tail) == 40
    shown = "\n".join(failure.log_tail)
    assert "raise ChildFailedError(" not in shown  # torchrun's own frames, left out
    assert "Root Cause (first observed failure):" in shown
    assert "[rank0]: RuntimeError" in shown  # the workers' errors got the room


# ------------------------------------------------------------- other backends' words


def test_a_kwok_pods_termination_message_carries_the_summary() -> None:
    # No log (kwok serves none): the termination message alone says a worker was killed.
    message = "\n".join(fixture("gloo_worker_sigkill.log")[-16:])
    found, why = classify(message=message, exit_code=1, container_reason="Error", step="node-0")
    assert found is INFRA
    assert "rank 0 on node-0 was killed by SIGKILL" in why


def test_an_oom_killed_container_names_the_killed_rank() -> None:
    found, why = classified(
        fixture("gloo_worker_sigkill.log"), container_reason="OOMKilled", exit_code=137
    )
    assert found is CAPACITY
    assert why.startswith("rank 0 on node-0 was killed by the kernel's OOM killer"), why


def test_a_plain_traceback_without_torchrun_is_still_the_training_code() -> None:
    lines = traceback(["KeyError: 'lr'"])
    assert classified(lines) == (USER, "the training code raised KeyError: 'lr'")
    oom = traceback(OOM.output[-1:])  # a CUDA OOM outside torchrun is still capacity
    assert classified(oom)[0] is CAPACITY


def test_describe_quotes_the_cause_once() -> None:
    log = fixture("gloo_valueerror_rank1.log")
    failure = failure_of(FAILED_JOB, [pod(0, 1, "rank 1: ValueError: bad learning rate: -0.1")],
                         log_tail=log, first="node-0")  # fmt: skip
    text = failure.describe()
    assert "rank 1 on node-0: the training code raised the error above" in text
    assert isinstance(failure, Failure)


# ------------------------------------------------------------- untrusted text


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["Root Cause (first observed failure):"],
        ["Root Cause (first observed failure):", "[0]:", "  rank      : x", "  exitcode  : ?"],
        ["Traceback (most recent call last):"] * 5000,
        ["[rank99999999999]: Traceback (most recent call last):", "[rank1]:"],
        ["\x1b[31mTraceback (most recent call last):", "ValueError: \x00\x07" + "x" * 10**6],
        ["Failures:", "[0]:", "  traceback : Traceback (most recent call last):", "  "] * 300,
    ],
)
def test_hostile_output_never_makes_a_reader_raise(lines: list[str]) -> None:
    cause = distributed.diagnose(lines)
    if cause is not None:
        assert len(cause.evidence()) < 1000
        assert "\x1b" not in cause.evidence()
        assert "\x00" not in cause.evidence()
    classify(log_tail=lines, exit_code=1, message="\n".join(lines[:50]))


def test_a_huge_exception_is_quoted_capped() -> None:
    huge = Worker(0, traceback(["ValueError: " + "bad " * 100_000]))
    _, why = classified(torchrun_log(huge))
    assert len(why) < distributed.QUOTE_LIMIT + 100
    assert "cut at" in why


def test_torchruns_frames_are_dropped_from_a_shown_tail() -> None:
    log = fixture("gloo_worker_sigkill.log")
    kept = distributed.without_launcher_traceback(log)
    assert not any("launch_agent" in line for line in kept)
    assert kept[-1].startswith("=")
    assert any("exitcode  : -9" in line for line in kept)
    plain = ["Traceback (most recent call last):", "ValueError: x"]
    assert distributed.without_launcher_traceback(plain) == plain
