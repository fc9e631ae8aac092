"""What a distributed training job's output says about why it failed.

Under ``torchrun`` the last Python traceback of a failed node's log is always
torchrun's own ``ChildFailedError``, followed by a banner and its failure summary::

    Root Cause (first observed failure):
    [0]:
      time      : 2026-11-27_15:08:23
      host      : localhost
      rank      : 1 (local_rank: 1)
      exitcode  : 1 (pid: 20143)
      error_file: <N/A>
      traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html

The worker's own exception comes earlier, each line prefixed ``[rankN]:`` (or inside the
summary's ``traceback`` field when the worker wrote an error file with ``@record``).
This module reads both (:func:`parse_summary`, :func:`worker_errors`), puts the failure
of each rank in a class from the known texts of CUDA, NCCL, gloo and c10d (:data:`RULES`)
or from the signal that ended it, and picks the root cause: the first rank that failed
for a reason of its own, not its peers that failed because of it (a ``Connection closed
by peer``, a SIGTERM sent by torchrun, a collective's watchdog timeout). Across nodes
(:func:`first_failure`) the earliest such failure wins.

Pure: text in, findings out, standard library only (the local supervisor imports it).
What it reads is a job's output: bounded (:data:`MAX_LINES` lines of at most
:data:`MAX_LINE` characters), and no text makes it raise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.errors import FailureClass

__all__ = [
    "RULES",
    "Cause",
    "RankFailure",
    "diagnose",
    "first_failure",
    "parse_summary",
    "without_launcher_traceback",
    "worker_errors",
]

#: Lines of a log (its end) and characters of a line that are read.
MAX_LINES = 600
MAX_LINE = 2000
#: Characters of the line an evidence quotes.
QUOTE_LIMIT = 400
#: Lines of one exception's message that are kept (NCCL's run over four).
_EXCEPTION_LINES = 8

_TRACEBACK = "Traceback (most recent call last)"
_CHILD_FAILED = "ChildFailedError"
#: ``[rank3]:`` (torchrun's prefix of a worker's lines: the global rank) or
#: ``[default1]:`` (older torchrun's ``--tee`` prefix: the local rank).
_PREFIX = re.compile(r"^\[(rank|default)(\d{1,7})\]:")
_SUMMARY_ROOT = re.compile(r"^\s*Root Cause \(first observed failure\):\s*\Z")
_SUMMARY_FAILURES = re.compile(r"^\s*Failures:\s*\Z")
_RECORD = re.compile(r"^\s*\[(\d{1,7})\]:\s*\Z")
_FIELD = re.compile(r"^(\s*)(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)\Z")
_RULE_LINE = re.compile(r"^\s*(?:-{8,}|={8,})\s*\Z")
_INT = re.compile(r"-?\d{1,9}")
_LOCAL_RANK = re.compile(r"local_rank:\s*(\d{1,7})")
#: glog's line of the agent when a worker ends: ``E1127 15:08:23.351000 22180 ...
#: failed (exitcode: 1) local_rank: 0 (pid: 22247) of binary: ...``.
_AGENT_FAILED = re.compile(
    r"^E(\d\d)(\d\d) (\d\d:\d\d:\d\d(?:\.\d+)?) .*failed \(exitcode: (-?\d+)\) "
    r"local_rank: (\d+)"
)
_SUMMARY_TIME = re.compile(r"^\d{4}-(\d\d)-(\d\d)_(\d\d:\d\d:\d\d)")
#: The start of a log line that is no part of an exception's message: glog and
#: c10d's ``[W1127 06:23:20.555 ProcessGroupNCCL.cpp:1575]`` lines, torchrun's banners.
_NOT_MESSAGE = re.compile(r"^(?:\[[IWEF]\d{4} |[IWEF]\d{4} \d\d:|\*{8,}|During handling|The above)")

_SIGNALS = {
    1: "SIGHUP",
    2: "SIGINT",
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    15: "SIGTERM",
}
#: Signals that come from outside a process (a kill, a preemption, an OOM killer, the
#: launcher stopping the peers of a failed worker), as opposed to a crash of its own.
_FROM_OUTSIDE = frozenset({"SIGKILL", "SIGTERM", "SIGINT", "SIGHUP"})


@dataclass(frozen=True)
class Rule:
    """A known failure text: where ``pattern`` is found in a rank's error, the failure
    is of ``failure_class``; ``what`` says it to a person. ``consequence``: such an
    error is what a rank meets when another failed first (a peer gone, a collective
    that never completes), so another rank's own failure is the root cause."""

    pattern: re.Pattern[str]
    failure_class: FailureClass
    what: str
    consequence: bool = False
    #: Evidence in any line of the rank's output, not only its exception: a GPU's
    #: hardware fault and NCCL's watchdog are logged, then the process aborts.
    in_log: bool = False


def _rule(
    pattern: str,
    klass: FailureClass,
    what: str,
    consequence: bool = False,
    in_log: bool = False,
) -> Rule:
    return Rule(re.compile(pattern, re.IGNORECASE), klass, what, consequence, in_log)


_CAP = FailureClass.CAPACITY
_CONF = FailureClass.CONFIGURATION
_INFRA = FailureClass.INFRASTRUCTURE
_USER = FailureClass.USER_CODE

#: The known texts, most specific first: an NCCL error that says "out of memory" or
#: "Duplicate GPU" is that, not a network failure; an ECC error is the hardware's, an
#: illegal address the code's (torch adds "device-side assertions" to every CUDA error,
#: so that phrase alone says nothing).
RULES: tuple[Rule, ...] = (
    _rule(r"Duplicate GPU detected", _CONF, "was given the same GPU as another process"),
    _rule(
        r"invalid device ordinal",
        _CONF,
        "asked for a GPU its node was not given (more processes per node than GPUs?)",
    ),
    _rule(
        r"no CUDA GPUs are available|no CUDA-capable device is detected|"
        r"Found no NVIDIA driver|cudaErrorNoDevice",
        _CONF,
        "found no GPU on its node (ask for nvidia.com/gpu in resources_per_node)",
    ),
    _rule(
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|"
        r"CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|"
        r"Cuda failure '?out of memory",
        _CAP,
        "ran out of GPU memory",
    ),
    _rule(r"^(?:\w+\.)*MemoryError\b", _CAP, "ran out of host memory"),
    _rule(
        r"uncorrectable ECC|ECC error|ECCUncorrectable|ECC_UNCORRECTABLE|"
        r"uncorrectable NVLink|NvlinkUncorrectable|\bXid\b|fallen off the bus|GPU is lost|"
        r"error containment|cudaErrorContained|hardware stack error|HardwareStackError",
        _INFRA,
        "met a GPU hardware fault",
        in_log=True,
    ),
    _rule(
        r"busy or unavailable|cudaErrorDevicesUnavailable",
        _INFRA,
        "found its GPU busy or unavailable",
    ),
    _rule(
        r"illegal memory access|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS|"
        r"misaligned address|cudaErrorMisalignedAddress|illegal instruction|"
        r"cudaErrorIllegalInstruction",
        _USER,
        "ran a GPU kernel that accessed memory out of bounds (a bad index or a custom "
        "kernel: the code's fault, not the hardware's)",
    ),
    _rule(
        r"device-side assert(?:ion)? triggered|cudaErrorAssert",
        _USER,
        "failed a device-side assertion (usually an index out of range)",
    ),
    _rule(
        r"Watchdog caught collective operation timeout|watchdog (?:thread )?(?:got stuck|"
        r"terminated)|NCCL communicator was aborted|Some NCCL operations have failed or "
        r"timed out|Timeout\(ms\)=\d+\) ran for",
        _INFRA,
        "timed out in a collective operation (a peer stopped, hung or was cut off)",
        consequence=True,
        in_log=True,
    ),
    _rule(
        r"ncclRemoteError|remote process exit|unhandled system error|ncclSystemError|"
        r"Connection closed by peer|Connection reset by peer|Broken pipe|ECONNRESET|"
        r"NET/IB|NET/Socket",
        _INFRA,
        "lost a peer or the network between the nodes",
        consequence=True,
    ),
    _rule(
        r"unhandled cuda error|ncclUnhandledCudaError",
        _INFRA,
        "met a CUDA failure inside NCCL",
    ),
    _rule(r"address already in use|EADDRINUSE", _INFRA, "found the rendezvous port taken"),
    _rule(
        r"Connection refused|ECONNREFUSED|Rendezvous\w*Error|DistStoreError|"
        r"DistNetworkError|waiting for clients|trying to connect to|failed to connect|"
        r"Socket Timeout|client socket has timed out",
        _INFRA,
        "could not rendezvous with the other nodes (a peer that never joined, or the "
        "master out of reach)",
        consequence=True,
    ),
)


@dataclass(frozen=True)
class RankFailure:
    """One failed worker as torchrun's summary (or its log) tells it."""

    rank: int | None = None
    local_rank: int | None = None
    host: str = ""
    #: torchrun's ``exitcode``: negative for a signal.
    exit_code: int | None = None
    #: The worker's own exception (from its error file), one entry a line.
    error: tuple[str, ...] = ()
    #: torchrun named it the root cause (the first failure it observed).
    root_cause: bool = False
    #: When it failed, ``MM-DD HH:MM:SS[.ffffff]`` (sortable within a job), or "".
    when: str = ""
    #: The end of its output (its prefixed lines), for evidence outside an exception.
    log: tuple[str, ...] = ()

    @property
    def signal(self) -> str | None:
        """The signal that ended it (``SIGKILL``), if one did."""
        code = self.exit_code
        if code is None:
            return None
        if code < 0:
            return _SIGNALS.get(-code, f"signal {-code}")
        if code in (137, 143):  # a shell's 128+N for KILL and TERM
            return _SIGNALS[code - 128]
        return None


@dataclass(frozen=True)
class Cause:
    """Why one rank failed, in a class, with the line that says so."""

    failure_class: FailureClass
    #: What happened, said of the rank (``ran out of GPU memory``).
    what: str
    #: The job's own line that shows it (an exception, an NCCL message), or "".
    quote: str = ""
    rank: int | None = None
    local_rank: int | None = None
    host: str = ""
    #: The step (``node-1``) whose output said it, when the reader knows.
    node: str | None = None
    #: It may be another rank's failure seen from here (see :class:`Rule`).
    consequence: bool = False
    #: torchrun named this rank the root cause on its node.
    root_cause: bool = False
    when: str = ""
    #: An exception the training code raised that no rule knows.
    raised: bool = False
    #: The signal that ended the rank (``SIGKILL``), when that is the evidence.
    signal: str | None = None

    def who(self) -> str:
        """``rank 1 on node-1`` (the parts that are known)."""
        if self.rank is not None:
            who = f"rank {self.rank}"
        elif self.local_rank is not None:
            who = f"local rank {self.local_rank}"
        elif self.node:
            return self.node
        else:
            who = "a worker"
        if self.node:
            who += f" on {self.node}"
        elif self.host and self.host != "localhost":
            who += f" on host {self.host}"
        return who

    def evidence(self) -> str:
        """One line: who failed, how, and the job's own words for it."""
        if self.raised:
            known = self.rank is not None or self.local_rank is not None
            who = f"{self.who()}: " if known else ""
            return f"{who}the training code raised {self.quote}"
        line = f"{self.who()} {self.what}"
        return f"{line}: {self.quote}" if self.quote else line

    def summary(self) -> str:
        """What a termination message says of it: who, and the job's own line."""
        return f"{self.who()}: {self.quote}" if self.quote else f"{self.who()} {self.what}"


# ---------------------------------------------------------------------- reading


def _bounded(lines: Iterable[str]) -> list[str]:
    return [str(line)[:MAX_LINE].rstrip("\r\n") for line in list(lines)[-MAX_LINES:]]


def _split_prefix(line: str) -> tuple[tuple[str, int] | None, str]:
    """``(("rank", 3), rest)`` for a worker's prefixed line, ``(None, line)`` else."""
    m = _PREFIX.match(line)
    if m is None:
        return None, line
    rest = line[m.end() :]
    return (m.group(1), int(m.group(2))), rest[1:] if rest.startswith(" ") else rest


def _int(text: str) -> int | None:
    m = _INT.search(text)
    return int(m.group(0)) if m else None


def _summary_when(text: str) -> str:
    m = _SUMMARY_TIME.match(text.strip())
    return f"{m.group(1)}-{m.group(2)} {m.group(3)}" if m else ""


def _exception_of(lines: Sequence[str]) -> tuple[str, ...]:
    """The exception a traceback (``lines`` from its header on) ends with: its line
    and the lines of its message, without the frames."""
    # The exception is the last run of unindented lines after the frames.
    found: list[str] = []
    for line in lines[1:]:
        if (
            not line.strip()
            or line.startswith((" ", "\t"))
            or line.lstrip().startswith(("File ", "^", "~"))
            or _NOT_MESSAGE.match(line)  # another process's line amid the traceback
        ):
            if found:
                break
            continue
        if _TRACEBACK in line:
            found = []
            continue
        found.append(line.strip())
        if len(found) >= _EXCEPTION_LINES:
            break
    return tuple(found)


Key = tuple[str, int] | None


def _by_prefix(lines: Iterable[str]) -> dict[Key, list[str]]:
    """The log's lines by the worker prefix they carry (``("rank", 1)``,
    ``("default", 0)``; ``None``: lines without one), the prefix removed."""
    by_key: dict[Key, list[str]] = {}
    for line in _bounded(lines):
        key, rest = _split_prefix(line)
        by_key.setdefault(key, []).append(rest)
    return by_key


def worker_errors(lines: Iterable[str]) -> dict[Key, list[tuple[str, ...]]]:
    """Each worker's exceptions in the log, in order, by its prefix (``("rank", 1)``,
    ``("default", 0)``; ``None``: lines without one). Torchrun's own
    ``ChildFailedError`` is left out: it says that a worker failed, not why."""
    return _exceptions(_by_prefix(lines))


def _exceptions(by_key: Mapping[Key, list[str]]) -> dict[Key, list[tuple[str, ...]]]:
    found: dict[Key, list[tuple[str, ...]]] = {}
    for key, own in by_key.items():
        starts = [i for i, line in enumerate(own) if _TRACEBACK in line]
        for n, start in enumerate(starts):
            end = starts[n + 1] if n + 1 < len(starts) else len(own)
            exc = _exception_of(own[start:end])
            if exc and not any(_CHILD_FAILED in line for line in exc[:1]):
                found.setdefault(key, []).append(exc)
    return found


def _agent_times(lines: Sequence[str]) -> dict[int, str]:
    """When the agent saw each local rank fail (glog's ``E.. failed (exitcode``)."""
    times: dict[int, str] = {}
    for line in lines:
        m = _AGENT_FAILED.match(line)
        if m is not None:
            times.setdefault(int(m.group(5)), f"{m.group(1)}-{m.group(2)} {m.group(3)}")
    return times


def parse_summary(lines: Iterable[str]) -> list[RankFailure]:
    """The failed workers of torchrun's last failure summary in ``lines`` (the root
    cause first), or ``[]`` when there is none."""
    own = _bounded(lines)
    # The last summary: from its "Failures:" (or, with none, its "Root Cause") line.
    last_root = max((i for i, line in enumerate(own) if _SUMMARY_ROOT.match(line)), default=None)
    if last_root is None:
        return []
    first = last_root
    for i in range(last_root - 1, max(-1, last_root - 400), -1):
        if _SUMMARY_FAILURES.match(own[i]):
            first = i
            break
        if _CHILD_FAILED in own[i]:
            break
    records: list[RankFailure] = []
    current: dict[str, object] | None = None
    root = False
    trace: list[str] = []
    field_indent = 0

    def close() -> None:
        nonlocal current, trace
        if current is not None:
            records.append(_record(current, trace, root))
        current, trace = None, []

    for line in own[first:]:
        if _SUMMARY_ROOT.match(line):
            close()
            root = True
            continue
        if _RULE_LINE.match(line):
            close()
            continue
        if _RECORD.match(line):
            close()
            current = {}
            continue
        if current is None:
            continue
        m = _FIELD.match(line)
        if m is not None and (not trace or len(m.group(1)) <= field_indent):
            field_indent = len(m.group(1))
            current[m.group(2)] = m.group(3).strip()
            trace = [m.group(3)] if m.group(2) == "traceback" else []
            continue
        if trace:
            trace.append(line)
    close()
    records.sort(key=lambda r: not r.root_cause)
    return records


def _record(fields: Mapping[str, object], trace: list[str], root: bool) -> RankFailure:
    rank_text = str(fields.get("rank", ""))
    local = _LOCAL_RANK.search(rank_text)
    error: tuple[str, ...] = ()
    if trace and _TRACEBACK in trace[0]:
        # The error file's traceback, indented under the field: dedent it by the
        # exception's indent (the least of its lines).
        rest = [line for line in trace[1:] if line.strip()]
        indent = min((len(line) - len(line.lstrip()) for line in rest), default=0)
        error = _exception_of([trace[0], *[line[indent:] for line in rest]])
    return RankFailure(
        rank=_int(rank_text),
        local_rank=int(local.group(1)) if local else None,
        host=untrusted.line(str(fields.get("host", "")), 253),
        exit_code=_int(str(fields.get("exitcode", ""))),
        error=error,
        root_cause=root,
        when=_summary_when(str(fields.get("time", ""))),
    )


# ---------------------------------------------------------------------- classing


def _quote(line: str) -> str:
    return untrusted.line(line.strip(), QUOTE_LIMIT)


def _match(error: Sequence[str], *, in_log: bool = False) -> tuple[Rule, str] | None:
    """The first rule (in :data:`RULES` order) any line of ``error`` matches, with the
    line; ``in_log``: only the rules that count in any line of a rank's output."""
    for rule in RULES:
        if in_log and not rule.in_log:
            continue
        for line in error:
            if rule.pattern.search(line):
                return rule, line
    return None


def cause_of(failure: RankFailure, *, oom_killed: bool = False) -> Cause | None:
    """The class of one rank's failure: a known error text first, then the signal
    that ended it, then any exception (the training code's), then its exit code."""
    base = Cause(
        FailureClass.UNKNOWN,
        "",
        rank=failure.rank,
        local_rank=failure.local_rank,
        host=failure.host,
        root_cause=failure.root_cause,
        when=failure.when,
    )
    known = _match(failure.error) or _match(failure.log, in_log=True)
    if known is not None:
        rule, line = known
        return replace(
            base,
            failure_class=rule.failure_class,
            what=rule.what,
            quote=_quote(line),
            consequence=rule.consequence,
        )
    sig = failure.signal
    base = replace(base, signal=sig)
    if sig in _FROM_OUTSIDE:
        if oom_killed and sig == "SIGKILL":
            what = "was killed by the kernel's OOM killer (SIGKILL: out of host memory)"
            return replace(base, failure_class=FailureClass.CAPACITY, what=what)
        what = f"was killed by {sig} from outside the training code"
        if sig == "SIGKILL":
            what += " (an OOM killer, a preemption, a lost node or a cancel)"
        # A SIGTERM is what torchrun sends the peers of a failed worker.
        return replace(base, failure_class=_INFRA, what=what, consequence=sig != "SIGKILL")
    if failure.error:
        return replace(
            base, failure_class=_USER, what="raised", quote=_quote(failure.error[0]), raised=True
        )
    if sig is not None:
        return replace(base, failure_class=_USER, what=f"crashed ({sig})")
    if failure.exit_code not in (None, 0):
        return replace(base, failure_class=_USER, what=f"exited with code {failure.exit_code}")
    return None


def _order(cause: Cause) -> tuple[bool, bool, int]:
    """Root cause first: a failure of its own before a consequence, torchrun's root
    cause before the others, then the lowest rank."""
    rank = cause.rank if cause.rank is not None else (cause.local_rank or 0)
    return (cause.consequence, not cause.root_cause, rank)


#: Lines of a rank's own output searched for evidence outside its exception.
_RANK_LOG_LINES = 60


def _own_keys(failure: RankFailure, only: bool) -> list[Key]:
    """The prefixes a summary record's worker writes under: its global rank's, its local
    rank's, or (the only failure of a log without prefixes) none."""
    keys: list[Key] = []
    if failure.rank is not None:
        keys.append(("rank", failure.rank))
    if failure.local_rank is not None:
        keys.append(("default", failure.local_rank))
    if only:
        keys.append(None)
    return keys


def _with_output(
    failure: RankFailure,
    keys: Sequence[Key],
    lines: Mapping[Key, list[str]],
    errors: Mapping[Key, list[tuple[str, ...]]],
) -> RankFailure:
    """``failure`` with the worker's own exception (unless it has one) and the end of
    its own lines, read under the first of ``keys`` that has an exception and under
    all of them."""
    error = failure.error or next((pick(errors[key]) for key in keys if errors.get(key)), ())
    log = tuple(line for key in keys for line in lines.get(key, [])[-_RANK_LOG_LINES:])
    return replace(failure, error=error, log=log)


def pick(errors: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    """Of a worker's exceptions, the one that says why it failed: the last one a rule
    knows (a CUDA error before a cleanup's), else the last one (what ended it)."""
    for exc in reversed(errors):
        if _match(exc) is not None:
            return exc
    return errors[-1] if errors else ()


def diagnose(
    lines: Iterable[str], *, node: str | None = None, oom_killed: bool = False
) -> Cause | None:
    """The root cause of a failure in one node's output (a log tail or a termination
    message): from torchrun's summary and its workers' exceptions, else from the
    exceptions alone; ``None`` when the text shows no failure. Never raises."""
    try:
        return _diagnose(_bounded(lines), node, oom_killed)
    except Exception:  # a job's text: a reader never fails because of it
        return None


def _diagnose(lines: list[str], node: str | None, oom_killed: bool) -> Cause | None:
    by_key = _by_prefix(lines)
    errors = _exceptions(by_key)
    summary = parse_summary(lines)
    failures: list[RankFailure] = []
    if summary:
        times = _agent_times(lines)
        only = len(summary) == 1
        for failure in summary:
            when = times.get(failure.local_rank) if failure.local_rank is not None else None
            failure = _with_output(failure, _own_keys(failure, only), by_key, errors)
            failures.append(replace(failure, when=when or failure.when))
    else:
        # No summary (no torchrun, or its end cut off): each worker that raised.
        for key in errors:
            failure = RankFailure(
                rank=key[1] if key and key[0] == "rank" else None,
                local_rank=key[1] if key and key[0] == "default" else None,
            )
            failures.append(_with_output(failure, [key], by_key, errors))
    causes = [c for f in failures if (c := cause_of(f, oom_killed=oom_killed)) is not None]
    if not causes:
        return None
    return replace(min(causes, key=_order), node=node)


def first_failure(per_node: Mapping[str, Iterable[str]]) -> tuple[str, Cause] | None:
    """Across nodes (step name -> its output), the node whose failure came first: a
    failure of its own before a consequence of another's, then the earliest, then the
    first node in the mapping's order. ``None`` when none shows a failure."""
    found = [
        (node, cause)
        for node, lines in per_node.items()
        if (cause := diagnose(lines, node=node)) is not None
    ]
    # min keeps the first of equals: the first node in the mapping's order.
    return min(found, key=lambda item: (item[1].consequence, item[1].when or "~"), default=None)


def without_launcher_traceback(lines: Sequence[str]) -> list[str]:
    """``lines`` without torchrun's own traceback of ``ChildFailedError`` (its frames
    say only that a worker failed): what a person reads keeps the workers' errors and
    the summary in the room the frames took."""
    out = list(lines)
    for end in range(len(out) - 1, -1, -1):
        if _CHILD_FAILED not in out[end] or out[end].startswith((" ", "\t")):
            continue
        start = end
        while start > 0 and _TRACEBACK not in out[start]:
            start -= 1
            if end - start > 80:
                return out
        if _TRACEBACK in out[start]:
            return [*out[:start], *out[end:]]
        return out
    return out
