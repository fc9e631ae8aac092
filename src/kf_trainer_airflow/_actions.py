"""What a task may do to its job when it is killed or when the job ends (shared by the
operator and the trigger without either importing the other)."""

from __future__ import annotations

from kf_trainer_core.tasks.interruptions import CANCEL_ACTIONS

#: ``on_kill_action``: delete the job, suspend it (kept, without pods), or let it run.
ON_KILL_ACTIONS = CANCEL_ACTIONS
#: ``on_finish_action``: delete the job, delete it only when it succeeded, or keep it.
ON_FINISH_ACTIONS = ("delete", "delete-succeeded", "keep")
