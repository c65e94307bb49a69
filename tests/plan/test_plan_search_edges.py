"""The planner's search at its edges: what a single MPPI iteration, its scoring and the previous action must do
exactly (tests that the mutation check showed were missing)."""
