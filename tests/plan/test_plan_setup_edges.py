"""The planner's set-up at its edges: limits, commands, holds and resets exactly as documented (tests that the
mutation check showed were missing)."""
