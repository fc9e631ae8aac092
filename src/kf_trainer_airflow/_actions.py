"""What a task may do to its job when it is killed or when the job ends (shared by the
operator and the trigger without either importing the other)."""

from __future__ import annotations

#: ``on_kill_action``: delete the job, suspend it (kept, without pods), or let it run.
ON_KILL_ACTIONS = ("delete", "suspend", "keep")
#: ``on_finish_action``: delete the job, delete it only when it succeeded, or keep it.
ON_FINISH_ACTIONS = ("delete", "delete-succeeded", "keep")
