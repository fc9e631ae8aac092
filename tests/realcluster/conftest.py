"""Tests on the real control plane (``control_plane`` fixture of the suite's pytest
plugin): kube-apiserver + etcd, the real JobSet and Trainer controllers, kwok nodes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
