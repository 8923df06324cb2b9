"""The tools a person runs: the CLI, replay, scenarios, the demo and the dashboard."""
