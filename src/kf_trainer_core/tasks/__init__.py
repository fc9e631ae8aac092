"""What orchestrator tasks share: task helpers, step waits, interruptions, the sync runner,
backend fields."""
